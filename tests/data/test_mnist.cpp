// tests/data/test_mnist.cpp — the idx reader and MnistDataset on small files the test writes
// (plain and .gz), their error messages, and the real Fashion-MNIST when it is installed.
#include <filesystem>

#include "tests/common/testing.h"
#include "minidl/data/mnist.h"
#include "tests/data/data_test_util.h"

namespace minidl::data {
namespace {

using namespace minidl::data::testing;

// A 3-image 4x5 "MNIST" in dir: train-* files, gzip-compressed or plain.
void write_small_mnist(const TempDir& dir, bool gz, const std::string& split = "train") {
  const auto write = gz ? write_gz : write_file;
  const std::string ext = gz ? ".gz" : "";
  write(dir.file(split + "-images-idx3-ubyte" + ext), idx_images(3, 4, 5));
  write(dir.file(split + "-labels-idx1-ubyte" + ext), idx_labels({7, 0, 9}));
}

TEST(IdxReader, ReadsPlainImagesAsUint8NxRowsxCols) {
  TempDir dir;
  write_file(dir.file("img"), idx_images(3, 4, 5));
  const Tensor images = read_idx_images(dir.file("img"));
  EXPECT_EQ(images.dtype(), DType::UInt8);
  EXPECT_EQ(images.shape(), (Shape{3, 4, 5}));
  const uint8_t* p = images.data<uint8_t>();
  for (int64_t k = 0; k < 60; ++k) ASSERT_EQ(p[k], idx_pixel(k)) << "pixel " << k;
}

TEST(IdxReader, ReadsGzipImagesAndLabelsLikePlainOnes) {
  TempDir dir;
  write_gz(dir.file("img.gz"), idx_images(3, 4, 5));
  write_file(dir.file("img"), idx_images(3, 4, 5));
  write_gz(dir.file("lab.gz"), idx_labels({7, 0, 9}));
  minidl::testing::expect_equal(read_idx_images(dir.file("img.gz")), read_idx_images(dir.file("img")));
  const Tensor labels = read_idx_labels(dir.file("lab.gz"));
  EXPECT_EQ(labels.shape(), (Shape{3}));
  EXPECT_EQ(labels.to_vector<int64_t>(), (std::vector<int64_t>{7, 0, 9}));
}

TEST(IdxReader, WrongMagicNamesFileFoundAndExpected) {
  TempDir dir;
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_labels({1, 2}, 0x00000803));
  EXPECT_THROW_MSG(
      read_idx_labels(dir.file("train-labels-idx1-ubyte.gz")), std::runtime_error,
      dir.file("train-labels-idx1-ubyte.gz") + ": bad magic 0x00000803, expected 0x00000801 (idx1 labels)");
}

TEST(IdxReader, TruncatedImageDataSaysHowManyBytesWereExpectedAndFound) {
  TempDir dir;
  Bytes b = idx_images(3, 4, 5);
  b.resize(16 + 10);
  write_file(dir.file("img"), b);
  EXPECT_THROW_MSG(read_idx_images(dir.file("img")), std::runtime_error,
                   dir.file("img") + ": truncated: expected 60 bytes of image data, got 10");
}

TEST(IdxReader, TruncatedHeaderIsAnError) {
  TempDir dir;
  Bytes b = idx_images(3, 4, 5);
  b.resize(6);
  write_file(dir.file("img"), b);
  EXPECT_THROW_MSG(read_idx_images(dir.file("img")), std::runtime_error,
                   "truncated: expected a 16-byte idx header (idx3 images), got 6 bytes");
}

TEST(IdxReader, TruncatedLabelDataIsAnError) {
  TempDir dir;
  Bytes b = idx_labels({1, 2, 3, 4});
  b.pop_back();
  write_file(dir.file("lab"), b);
  EXPECT_THROW_MSG(read_idx_labels(dir.file("lab")), std::runtime_error,
                   "truncated: expected 4 bytes of label data, got 3");
}

TEST(IdxReader, CutGzipStreamIsReportedAsTruncated) {
  TempDir dir;
  write_gz(dir.file("full.gz"), idx_images(50, 28, 28));
  Bytes gz = read_file(dir.file("full.gz"));
  gz.resize(gz.size() / 2);
  write_file(dir.file("cut.gz"), gz);
  EXPECT_THROW_MSG(read_idx_images(dir.file("cut.gz")), std::runtime_error,
                   dir.file("cut.gz") + ": truncated: expected 39200 bytes of image data, got");
}

TEST(IdxReader, CorruptGzipStreamIsAnErrorNamingTheFile) {
  TempDir dir;
  write_gz(dir.file("full.gz"), idx_images(50, 28, 28));
  Bytes gz = read_file(dir.file("full.gz"));
  for (size_t k = 20; k < gz.size() - 8; k += 3) gz[k] ^= 0x5A;  // garble the deflate stream
  write_file(dir.file("bad.gz"), gz);
  EXPECT_THROW_MSG(read_idx_images(dir.file("bad.gz")), std::runtime_error,
                   dir.file("bad.gz") + ": corrupt gzip data: ");
}

TEST(IdxReader, GzipChecksumMismatchIsAnError) {
  TempDir dir;
  write_gz(dir.file("full.gz"), idx_images(2, 4, 5));
  Bytes gz = read_file(dir.file("full.gz"));
  gz[gz.size() - 6] ^= 1;  // a bit of the CRC-32 in the 8-byte trailer
  write_file(dir.file("crc.gz"), gz);
  EXPECT_THROW_MSG(read_idx_images(dir.file("crc.gz")), std::runtime_error,
                   dir.file("crc.gz") + ": corrupt gzip data: incorrect data check");
}

TEST(IdxReader, TrailingBytesAfterTheAnnouncedDataAreAnError) {
  TempDir dir;
  Bytes b = idx_labels({1, 2});
  b.push_back(5);
  write_file(dir.file("lab"), b);
  EXPECT_THROW_MSG(read_idx_labels(dir.file("lab")), std::runtime_error,
                   "unexpected data after the 2 bytes of label data");
}

TEST(IdxReader, MissingFileNamesThePath) {
  EXPECT_THROW_MSG(read_idx_images("/nonexistent/minidl/img"), std::runtime_error,
                   "/nonexistent/minidl/img: cannot open");
}

TEST(MnistDataset, LoadsGzipSplitNormalisesAndReturnsInt64Targets) {
  TempDir dir;
  write_small_mnist(dir, /*gz=*/true);
  const MnistDataset ds(dir.path(), /*train=*/true, {.mean = 0.5, .std = 0.25});
  ASSERT_EQ(ds.size(), 3);
  const Example ex = ds.get(1);
  EXPECT_EQ(ex.input.dtype(), DType::Float32);
  EXPECT_EQ(ex.input.shape(), (Shape{1, 4, 5}));
  EXPECT_EQ(ex.target.dtype(), DType::Int64);
  EXPECT_EQ(ex.target.dim(), 0);
  EXPECT_EQ(ex.target.item<int64_t>(), 0);
  const float* x = ex.input.data<float>();
  for (int64_t k = 0; k < 20; ++k) EXPECT_NEAR(x[k], (idx_pixel(20 + k) / 255.0 - 0.5) / 0.25, 1e-5) << "pixel " << k;
  EXPECT_EQ(ds.get(2).target.item<int64_t>(), 9);
}

TEST(MnistDataset, ReadsPlainFilesAndTheTestSplit) {
  TempDir dir;
  write_small_mnist(dir, /*gz=*/false, "t10k");
  const MnistDataset ds(dir.path(), /*train=*/false, {.mean = 0.0, .std = 1.0});
  ASSERT_EQ(ds.size(), 3);
  EXPECT_NEAR(ds.get(0).input.data<float>()[1], idx_pixel(1) / 255.0, 1e-6);
  EXPECT_EQ(ds.images().dtype(), DType::UInt8);  // raw bytes kept in memory
}

TEST(MnistDataset, ImageAndLabelCountMismatchNamesBothFiles) {
  TempDir dir;
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_images(3, 4, 5));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_labels({1, 2}));
  EXPECT_THROW_MSG(MnistDataset(dir.path(), true), std::runtime_error,
                   dir.file("train-images-idx3-ubyte.gz") + " holds 3 images but " +
                       dir.file("train-labels-idx1-ubyte.gz") + " holds 2 labels");
}

TEST(MnistDataset, LabelAboveNineIsAnError) {
  TempDir dir;
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_images(2, 4, 5));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_labels({1, 200}));
  EXPECT_THROW_MSG(MnistDataset(dir.path(), true), std::runtime_error, "label 200 at index 1 is out of range 0..9");
}

TEST(MnistDataset, MissingDirectorySuggestsTheDebianPackage) {
  EXPECT_THROW_MSG(MnistDataset("/nonexistent/fashion", true), std::runtime_error,
                   "directory /nonexistent/fashion does not exist");
  EXPECT_THROW_MSG(MnistDataset("/nonexistent/fashion", true), std::runtime_error,
                   "apt-get install dataset-fashion-mnist");
}

TEST(MnistDataset, MissingFileNamesBothCandidatePaths) {
  TempDir dir;
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_images(3, 4, 5));
  EXPECT_THROW_MSG(
      MnistDataset(dir.path(), true), std::runtime_error,
      "neither " + dir.file("train-labels-idx1-ubyte") + " nor " + dir.file("train-labels-idx1-ubyte.gz") + " exists");
}

TEST(MnistDataset, OutOfRangeIndexIsAnError) {
  TempDir dir;
  write_small_mnist(dir, true);
  const MnistDataset ds(dir.path(), true);
  EXPECT_THROW_MSG(ds.get(3), std::out_of_range, "index 3 out of range for a dataset of 3 examples");
}

// ---- the real data set (Debian package dataset-fashion-mnist) ----

TEST(FashionMnist, RealFilesHave60000TrainAnd10000TestImagesWithKnownFirstLabels) {
  if (!std::filesystem::exists(kFashionMnistDir))
    GTEST_SKIP() << kFashionMnistDir << " not found; install it with `apt-get install dataset-fashion-mnist`";
  const MnistDataset train(kFashionMnistDir, true);
  const MnistDataset test(kFashionMnistDir, false);
  ASSERT_EQ(train.size(), 60000);
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(train.images().shape(), (Shape{60000, 28, 28}));
  const std::vector<int64_t> first_train{9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  const std::vector<int64_t> first_test{9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(train.get(i).target.item<int64_t>(), first_train[i]) << "train " << i;
    EXPECT_EQ(test.get(i).target.item<int64_t>(), first_test[i]) << "test " << i;
  }
  // Raw pixels span 0..255 and their mean is the normalisation constant 0.2860 (x 255).
  const uint8_t* p = train.images().data<uint8_t>();
  int64_t sum = 0;
  uint8_t lo = 255, hi = 0;
  for (int64_t k = 0; k < train.images().numel(); ++k) {
    sum += p[k];
    lo = std::min(lo, p[k]);
    hi = std::max(hi, p[k]);
  }
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 255);
  EXPECT_NEAR(static_cast<double>(sum) / train.images().numel() / 255.0, 0.2860, 1e-4);
  // Normalised inputs lie in [(0 - 0.2860) / 0.3530, (1 - 0.2860) / 0.3530].
  const std::vector<float> x = train.get(0).input.to_vector<float>();
  const auto [mn, mx] = std::minmax_element(x.begin(), x.end());
  EXPECT_NEAR(*mn, -0.2860 / 0.3530, 1e-5);
  EXPECT_LE(*mx, (1 - 0.2860) / 0.3530 + 1e-5);
  EXPECT_GT(*mx, 1.0f);
}

}  // namespace
}  // namespace minidl::data
