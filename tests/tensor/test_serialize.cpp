// tests/tensor/test_serialize.cpp — safetensors round trip, atomic save, and corrupt files.
#include <cstdio>
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
TensorMap sample() {
  return {{"a.weight", randn({3, 4}, RandomKey{1, 0})},
          {"a.bias", arange(0.0, 3.0, 1.0, DType::Float64)},
          {"steps", from_vector<int64_t>({7})},
          {"img", full({2, 2}, 200, DType::UInt8)},
          {"empty", zeros({0, 5})}};
}
}  // namespace

TEST(Safetensors, RoundTripIsBitIdentical) {
  const std::string path = temp_path("rt.safetensors");
  save(sample(), path, {{"epoch", "3"}});
  SafetensorsFile f = load(path);
  EXPECT_EQ(f.metadata.at("epoch"), "3");
  ASSERT_EQ(f.tensors.size(), 5u);
  for (const auto& [k, t] : sample()) minidl::testing::expect_equal(f.tensors.at(k), t, k);
}

TEST(Safetensors, NonContiguousTensorsAreSavedInLogicalOrder) {
  Tensor t = arange(6).reshape({2, 3}).t();
  SafetensorsFile f = deserialize(serialize({{"t", t}}));
  EXPECT_EQ(f.tensors.at("t").to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(Safetensors, HeaderIsEightByteAlignedJson) {
  const std::string b = serialize(sample());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(b[8], '{');
  EXPECT_NE(b.find("\"dtype\":\"F32\""), std::string::npos);
}

TEST(Safetensors, SaveReplacesAtomicallyAndLeavesNoTempFile) {
  const std::string path = temp_path("atomic.safetensors");
  save({{"x", ones({2})}}, path);
  save({{"x", zeros({2})}}, path);
  EXPECT_EQ(load(path).tensors.at("x").to_vector<float>(), (std::vector<float>{0, 0}));
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(Safetensors, FailedSaveKeepsThePreviousFile) {
  const std::string path = temp_path("keep.safetensors");
  save({{"x", ones({2})}}, path);
  EXPECT_THROW(save({{"__metadata__", ones({1})}}, path), std::invalid_argument);
  EXPECT_THROW(save({{"x", zeros({2})}}, temp_path("no_such_dir/x.safetensors")), std::runtime_error);
  EXPECT_EQ(load(path).tensors.at("x").to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(Safetensors, TruncatedFileIsAClearError) {
  const std::string path = temp_path("trunc.safetensors");
  const std::string b = serialize(sample());
  write_bytes(path, b.substr(0, b.size() - 10));
  EXPECT_THROW_MSG(load(path), std::runtime_error, "outside the data section");
  write_bytes(path, b.substr(0, 5));
  EXPECT_THROW_MSG(load(path), std::runtime_error, path + ": truncated");
  write_bytes(path, b.substr(0, 40));
  EXPECT_THROW_MSG(load(path), std::runtime_error, "truncated: header length");
}

TEST(Safetensors, CorruptHeaderIsAClearError) {
  std::string b = serialize({{"x", ones({2})}});
  b[8] = '#';  // the opening brace of the JSON header
  EXPECT_THROW_MSG(deserialize(b, "f"), std::runtime_error, "f: corrupt JSON header");
  std::string huge(8, '\xff');
  EXPECT_THROW_MSG(deserialize(huge + "{}", "g"), std::runtime_error, "exceeds the 100 MiB limit");
}

TEST(Safetensors, MissingFileNamesThePath) {
  EXPECT_THROW_MSG(load("/nonexistent/model.safetensors"), std::runtime_error,
                   "cannot open /nonexistent/model.safetensors");
}

TEST(Safetensors, FileOpensInAnIndependentPythonReader) {
  // tests/tensor/read_safetensors.py parses the format with the standard library and numpy
  const std::string path = temp_path("py.safetensors");
  save(sample(), path, {{"epoch", "3"}});
  const std::string cmd =
      "/usr/bin/python3 " + std::string(MINIDL_SOURCE_DIR) + "/tests/tensor/read_safetensors.py " + path;
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-numpy is not installed";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof buf, p)) out += buf;
  ASSERT_EQ(pclose(p), 0) << out;
  // the reader prints name, dtype, shape and the sum of each tensor
  Tensor w = sample().at("a.weight");
  double s = 0;
  for (float v : w.to_vector<float>()) s += v;
  char expect[128];
  std::snprintf(expect, sizeof expect, "a.weight float32 (3, 4) %.4f", s);
  EXPECT_THAT(out, ::testing::HasSubstr(expect));
  EXPECT_THAT(out, ::testing::HasSubstr("a.bias float64 (3,) 3.0000"));
  EXPECT_THAT(out, ::testing::HasSubstr("img uint8 (2, 2) 800.0000"));
  EXPECT_THAT(out, ::testing::HasSubstr("empty float32 (0, 5) 0.0000"));
  EXPECT_THAT(out, ::testing::HasSubstr("metadata {'epoch': '3'}"));
}
