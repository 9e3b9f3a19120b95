// tests/data/test_idx_hostile.cpp — idx files whose header claims far more than the file holds
// (1e9 images of 28x28: 784 GB): a clear error naming the file and the announced size, plain or
// gzip, without first allocating what the header claims.
#include "minidl/data/mnist.h"
#include "tests/common/testing.h"
#include "tests/data/data_test_util.h"

using namespace minidl;
using namespace minidl::data;
using namespace minidl::data::testing;

namespace {

// An idx3 header announcing n images of 28x28, followed by `present` images' worth of bytes.
Bytes forged_images(uint32_t n, uint32_t present) {
  Bytes b = idx_images(present, 28, 28);
  Bytes count;
  put_be32(count, n);
  std::copy(count.begin(), count.end(), b.begin() + 4);
  return b;
}

}  // namespace

TEST(IdxHostile, PlainHeaderClaimingABillionImagesNamesTheFileAndTheSize) {
  TempDir dir;
  write_file(dir.file("img"), forged_images(1000000000, 2));
  const int64_t before = minidl::testing::peak_resident_mib();
  EXPECT_THROW_MSG(read_idx_images(dir.file("img")), std::runtime_error,
                   dir.file("img") +
                       ": truncated: expected 784000000000 bytes of image data, got 1568 "
                       "(the header announces [1000000000, 28, 28])");
  EXPECT_LT(minidl::testing::peak_resident_mib() - before, 64);
}

TEST(IdxHostile, GzipHeaderClaimingABillionImagesIsBoundedByWhatDecompresses) {
  TempDir dir;
  write_gz(dir.file("img.gz"), forged_images(1000000000, 100));
  const int64_t before = minidl::testing::peak_resident_mib();
  EXPECT_THROW_MSG(read_idx_images(dir.file("img.gz")), std::runtime_error,
                   dir.file("img.gz") +
                       ": truncated: expected 784000000000 bytes of image data, got 78400 "
                       "(the header announces [1000000000, 28, 28])");
  EXPECT_LT(minidl::testing::peak_resident_mib() - before, 64);
}

TEST(IdxHostile, SizesWhoseProductOverflowsAreRefusedBeforeMultiplying) {
  // 256 x 2^31 x 2^31 = 2^70 bytes: formed in int64 it wraps to 0 (found by fuzz/fuzz_idx_reader)
  TempDir dir;
  Bytes header;
  for (uint32_t v : {0x00000803u, 256u, 1u << 31, 1u << 31}) put_be32(header, v);
  write_file(dir.file("img"), header);
  EXPECT_THROW_MSG(read_idx_images(dir.file("img")), std::runtime_error,
                   dir.file("img") + ": bad header: sizes [256, 2147483648, 2147483648] are implausibly large");
}

TEST(IdxHostile, ZeroImagesOfAnImplausibleSizeAreRefused) {
  // 0 images of 2^32-1 x 2^32-1: no bytes to read, but the shape itself overflows int64
  // (found by fuzz/fuzz_idx_reader)
  TempDir dir;
  Bytes header;
  for (uint32_t v : {0x00000803u, 0u, 0xFFFFFFFFu, 0xFFFFFFFFu}) put_be32(header, v);
  write_file(dir.file("img"), header);
  EXPECT_THROW_MSG(read_idx_images(dir.file("img")), std::runtime_error,
                   dir.file("img") + ": bad header: sizes [0, 4294967295, 4294967295] are implausibly large");
}
