// tests/tensor/test_serialize_hostile.cpp — safetensors load() on crafted files: offsets outside
// the data, a shape the data cannot hold, unknown dtypes, trailing bytes, gaps and overlaps
// between tensors, a valid file padded to 512 MB (refused without reading the
// padding: peak memory stays small), /dev/zero (refused at once), a header announcing more
// than the file holds.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "minidl/tensor/serialize.h"
#include "tests/common/temp_dir.h"
#include "tests/common/testing.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  static const minidl::testing::TempDir dir;  // removed when the test binary exits
  return dir.file(name);
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// 8-byte little-endian header length, the JSON header, then `data` bytes of zeros.
std::string crafted(const std::string& json, size_t data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + std::string(data, '\0');
}

}  // namespace

TEST(SafetensorsHostile, OutOfRangeOffsetsAndBadDtypeAreErrors) {
  EXPECT_THROW_MSG(deserialize(crafted(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "f"),
                   std::runtime_error, "data_offsets [0,16] outside the data section of 8 bytes");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "f"),
                   std::runtime_error, "needs 12 bytes");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2), "f"),
                   std::runtime_error, "unsupported dtype");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"x":{"shape":[2]}})", 0), "f"), std::runtime_error, "malformed entry");
}

TEST(SafetensorsHostile, TrailingBytesAfterTheLastTensorAreAnError) {
  const std::string path = temp_path("trailing.safetensors");
  write_bytes(path, serialize({{"x", ones({2})}}) + "garbage!");
  EXPECT_THROW_MSG(load(path), std::runtime_error, path + ": 8 unexpected bytes after the last tensor");
  EXPECT_THROW_MSG(deserialize(serialize({{"x", ones({2})}}) + "garbage!", "buf"), std::runtime_error,
                   "buf: 8 unexpected bytes after the last tensor");
}

// Numbers that are not integers as written: a dimension of 9e89 (an integer too long for 64 bits,
// which the JSON parser reads as a float; the fuzzer's find, undefined behaviour when cast), a
// fractional one, a float offset, a negative dimension and offset, a shape that is not an array.
TEST(SafetensorsHostile, ShapesAndOffsetsMustBeIntegersAsWritten) {
  const std::string huge(90, '8');
  EXPECT_THROW_MSG(
      deserialize(crafted(R"({"a":{"dtype":"F32","shape":[2,)" + huge + R"(],"data_offsets":[0,8]}})", 8), "f"),
      std::runtime_error, "f: tensor 'a' has shape [2,8.888888888888888e+89]: each value must be an integer");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8), "f"),
                   std::runtime_error, "tensor 'a' has shape [2.5]: each value must be an integer from 0 to 2^63 - 1");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", 8), "f"),
                   std::runtime_error, "tensor 'a' has data_offsets [0,8.0]: each value must be an integer");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "f"),
                   std::runtime_error, "tensor 'a' has a negative value in its shape [-2]");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,8]}})", 8), "f"),
                   std::runtime_error, "tensor 'a' has a negative value in its data_offsets [-8,8]");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8), "f"),
                   std::runtime_error, "tensor 'a' has shape 2, not an array");
  // 2^63 fits uint64 but not a dimension
  EXPECT_THROW_MSG(
      deserialize(crafted(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", 8), "f"),
      std::runtime_error, "has shape [9223372036854775808]: each value must be an integer from 0 to 2^63 - 1");
}

TEST(SafetensorsHostile, GapsAndOverlapsBetweenTensorsAreErrors) {
  EXPECT_THROW_MSG(deserialize(crafted(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), "f"),
                   std::runtime_error, "tensor 'a' starts at byte 4 of the data section, expected 0 (a gap before it)");
  EXPECT_THROW_MSG(deserialize(crafted(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                       8),
                               "f"),
                   std::runtime_error, "tensor 'b' starts at byte 4 of the data section, expected 8 (it overlaps");
  // Out of name order but tiling the data exactly: valid (the PyTorch writer orders by dtype).
  SafetensorsFile ok = deserialize(crafted(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                           8),
                                   "f");
  EXPECT_EQ(ok.tensors.size(), 2u);
}

TEST(SafetensorsHostile, AValidFilePaddedTo512MBIsRefusedWithoutReadingIt) {
  const std::string path = temp_path("padded.safetensors");
  write_bytes(path, serialize({{"w", ones({4, 4})}}));
  fs::resize_file(path, uint64_t{512} << 20);  // sparse: no disk space used
  const int64_t before = minidl::testing::peak_resident_mib();
  EXPECT_THROW_MSG(load(path), std::runtime_error, "unexpected bytes after the last tensor");
  EXPECT_LT(minidl::testing::peak_resident_mib() - before, 64) << "load() read the padding into memory";
  fs::remove(path);
}

TEST(SafetensorsHostile, DevZeroIsRefusedAtOnce) {
  const int64_t before = minidl::testing::peak_resident_mib();
  EXPECT_THROW_MSG(load("/dev/zero"), std::runtime_error, "/dev/zero: not a regular file");
  EXPECT_LT(minidl::testing::peak_resident_mib() - before, 64);
}

TEST(SafetensorsHostile, AHeaderAnnouncingMoreThanTheFileHoldsIsRefusedBeforeAllocating) {
  const std::string path = temp_path("huge_tensor.safetensors");
  // 2^40 floats claimed, 16 bytes present.
  write_bytes(path, crafted(R"({"x":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,16]}})", 16));
  EXPECT_THROW_MSG(load(path), std::runtime_error, "is larger than the data section of 16 bytes");
  // A header length beyond the file size: refused before the header is read.
  std::string b = crafted("{}", 0);
  b[0] = 0;
  b[1] = 0;
  b[2] = 0x10;  // 1 MiB of header announced, 2 bytes present
  write_bytes(path, b);
  EXPECT_THROW_MSG(load(path), std::runtime_error, "truncated: header length 1048576 but the file has 10 bytes");
}
