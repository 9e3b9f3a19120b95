// tests/data/test_cifar10.cpp — the CIFAR-10 binary reader on small batch files the test writes.
#include "tests/common/testing.h"
#include "minidl/data/cifar10.h"
#include "tests/data/data_test_util.h"

namespace minidl::data {
namespace {

using namespace minidl::data::testing;

TEST(Cifar10, ReadsRecordsAsLabelsAndChwImages) {
  TempDir dir;
  write_file(dir.file("b.bin"), cifar_records({3, 9, 0}));
  const CifarBatch b = read_cifar10_batch(dir.file("b.bin"));
  EXPECT_EQ(b.images.shape(), (Shape{3, 3, 32, 32}));
  EXPECT_EQ(b.labels.to_vector<int64_t>(), (std::vector<int64_t>{3, 9, 0}));
  // Record 1, green channel (c = 1), row 2, column 5: byte k = 1024 + 2 * 32 + 5 of its pixels.
  const int k = 1024 + 2 * 32 + 5;
  EXPECT_EQ(b.images.data<uint8_t>()[1 * 3072 + k], (1 * 31 + k) % 256);
}

TEST(Cifar10, DatasetConcatenatesFilesAndNormalisesPerChannel) {
  TempDir dir;
  write_file(dir.file("a.bin"), cifar_records({1, 2}, 0));
  write_gz(dir.file("b.bin.gz"), cifar_records({3}, 2));
  const Cifar10Dataset ds({dir.file("a.bin"), dir.file("b.bin.gz")},
                          {.mean = {0.5, 0.25, 0.0}, .std = {0.5, 0.5, 2.0}});
  ASSERT_EQ(ds.size(), 3);
  const Example ex = ds.get(2);
  EXPECT_EQ(ex.input.shape(), (Shape{3, 32, 32}));
  EXPECT_EQ(ex.target.item<int64_t>(), 3);
  const float* x = ex.input.data<float>();
  const double mean[3] = {0.5, 0.25, 0.0}, std[3] = {0.5, 0.5, 2.0};
  for (int c = 0; c < 3; ++c)
    for (int k : {0, 77, 1023}) {
      const int byte = c * 1024 + k;
      EXPECT_NEAR(x[byte], ((2 * 31 + byte) % 256 / 255.0 - mean[c]) / std[c], 1e-5) << "c " << c << " k " << k;
    }
}

TEST(Cifar10, DirectoryLayoutTrainIsFiveBatchesTestIsOne) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("cifar-10-batches-bin"));
  for (int b = 1; b <= 5; ++b)
    write_file(dir.file("cifar-10-batches-bin/data_batch_" + std::to_string(b) + ".bin"),
               cifar_records({static_cast<uint8_t>(b), 0}));
  write_file(dir.file("cifar-10-batches-bin/test_batch.bin"), cifar_records({4}));
  const Cifar10Dataset train(dir.path(), true), test(dir.path(), false);
  EXPECT_EQ(train.size(), 10);
  EXPECT_EQ(test.size(), 1);
  EXPECT_EQ(train.get(4).target.item<int64_t>(), 3);  // first record of data_batch_3
  EXPECT_EQ(test.get(0).target.item<int64_t>(), 4);
}

TEST(Cifar10, PartialRecordIsReportedWithSizes) {
  TempDir dir;
  Bytes b = cifar_records({1, 2});
  b.resize(b.size() - 100);
  write_file(dir.file("cut.bin"), b);
  EXPECT_THROW_MSG(read_cifar10_batch(dir.file("cut.bin")), std::runtime_error,
                   dir.file("cut.bin") +
                       ": truncated or not a CIFAR-10 binary batch: 6046 bytes is not a whole number "
                       "of 3073-byte records");
}

TEST(Cifar10, LabelAboveNineIsAnError) {
  TempDir dir;
  write_file(dir.file("x.bin"), cifar_records({1, 12}));
  EXPECT_THROW_MSG(read_cifar10_batch(dir.file("x.bin")), std::runtime_error, "record 1 has label 12, expected 0..9");
}

TEST(Cifar10, EmptyAndMissingFilesAreErrors) {
  TempDir dir;
  write_file(dir.file("empty.bin"), {});
  EXPECT_THROW_MSG(read_cifar10_batch(dir.file("empty.bin")), std::runtime_error, "empty file");
  EXPECT_THROW_MSG(Cifar10Dataset(dir.path(), false), std::runtime_error,
                   dir.file("test_batch.bin") + " does not exist");
}

}  // namespace
}  // namespace minidl::data
