// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/fashion_mnist.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "files.hpp"

namespace {

using prsgd::errc;
using namespace prsgd::algorithms;
namespace fs = std::filesystem;

void put_be32(std::vector<std::uint8_t>& v, std::uint32_t x) {
  v.push_back(static_cast<std::uint8_t>(x >> 24U));
  v.push_back(static_cast<std::uint8_t>(x >> 16U));
  v.push_back(static_cast<std::uint8_t>(x >> 8U));
  v.push_back(static_cast<std::uint8_t>(x));
}

std::vector<std::uint8_t> idx_images(std::uint32_t count, std::uint32_t rows = 28, std::uint32_t cols = 28,
                                     std::uint32_t magic = 0x803) {
  std::vector<std::uint8_t> v;
  put_be32(v, magic);
  put_be32(v, count);
  put_be32(v, rows);
  put_be32(v, cols);
  for (std::uint32_t i = 0; i < count * rows * cols; ++i) {
    v.push_back(static_cast<std::uint8_t>((i * 7U) % 256U));
  }
  return v;
}

std::vector<std::uint8_t> idx_labels(std::uint32_t count, std::uint32_t magic = 0x801) {
  std::vector<std::uint8_t> v;
  put_be32(v, magic);
  put_be32(v, count);
  for (std::uint32_t i = 0; i < count; ++i) {
    v.push_back(static_cast<std::uint8_t>(i % 10U));
  }
  return v;
}

class FashionMnistFiles : public ::testing::Test {
 protected:
  void write_gz(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    gzFile f = gzopen((dir_ / name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    if (!bytes.empty()) {
      ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
  }
  void write_raw(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(dir_ / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  void write_pair(const std::vector<std::uint8_t>& images, const std::vector<std::uint8_t>& labels) {
    write_gz("train-images-idx3-ubyte.gz", images);
    write_gz("train-labels-idx1-ubyte.gz", labels);
  }
  [[nodiscard]] std::string dir() const { return dir_.string(); }

  prsgd::test::scratch_dir scratch_{"prsgd-fmnist"};
  fs::path dir_ = scratch_.path();
};

TEST_F(FashionMnistFiles, LoadsValidFilesAndNormalises) {
  write_pair(idx_images(3), idx_labels(3));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_TRUE(ds.has_value()) << ds.error().message();
  EXPECT_EQ(ds->size(), 3U);
  EXPECT_EQ(ds->num_classes, 10);
  EXPECT_EQ(ds->shape, (std::array<int, 3>{1, 28, 28}));
  EXPECT_EQ(ds->sample_size(), 784U);
  ASSERT_EQ(ds->features.size(), 3U * 784U);
  EXPECT_EQ(ds->labels, (std::vector<std::int32_t>{0, 1, 2}));
  for (std::size_t i = 0; i < ds->features.size(); ++i) {
    const float byte = static_cast<float>((i * 7U) % 256U);
    const float want = (byte / 255.0F - 0.2860F) / 0.3530F;
    ASSERT_NEAR(ds->features[i], want, 1e-6F) << "pixel " << i;
  }
}

TEST_F(FashionMnistFiles, SizeReadsTheLabelFileOnly) {
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(7));  // no image file at all
  auto n = fashion_mnist_size(dir(), split::train);
  ASSERT_TRUE(n.has_value()) << n.error().message();
  EXPECT_EQ(*n, 7U);
  auto none = fashion_mnist_size(dir(), split::test);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, errc::io_error);
  EXPECT_NE(none.error().context.find("t10k-labels-idx1-ubyte.gz"), std::string::npos) << none.error().context;
  write_gz("t10k-labels-idx1-ubyte.gz", idx_images(1));  // an image file where labels belong
  auto wrong = fashion_mnist_size(dir(), split::test);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, errc::decode_failed);
}

TEST_F(FashionMnistFiles, UnnormalisedStaysInUnitInterval) {
  write_pair(idx_images(2), idx_labels(2));
  auto ds = load_fashion_mnist(dir(), split::train, {.max_samples = 0, .normalise = false});
  ASSERT_TRUE(ds.has_value()) << ds.error().message();
  for (float v : ds->features) {
    ASSERT_GE(v, 0.0F);
    ASSERT_LE(v, 1.0F);
  }
  EXPECT_FLOAT_EQ(ds->features[1], 7.0F / 255.0F);
}

TEST_F(FashionMnistFiles, MaxSamplesKeepsPrefix) {
  write_pair(idx_images(5), idx_labels(5));
  auto ds = load_fashion_mnist(dir(), split::train, {.max_samples = 2});
  ASSERT_TRUE(ds.has_value()) << ds.error().message();
  EXPECT_EQ(ds->size(), 2U);
  EXPECT_EQ(ds->features.size(), 2U * 784U);
}

TEST_F(FashionMnistFiles, MissingFileIsIoError) {
  auto ds = load_fashion_mnist(dir(), split::test);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::io_error);
  EXPECT_NE(ds.error().context.find("t10k-labels-idx1-ubyte.gz"), std::string::npos) << ds.error().context;
}

TEST_F(FashionMnistFiles, BadMagicNamesFile) {
  write_pair(idx_images(2, 28, 28, 0x804), idx_labels(2));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("train-images-idx3-ubyte.gz"), std::string::npos) << ds.error().context;
  EXPECT_NE(ds.error().context.find("magic"), std::string::npos) << ds.error().context;
}

TEST_F(FashionMnistFiles, BadLabelMagicIsDecodeFailed) {
  write_pair(idx_images(2), idx_labels(2, 0x803));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("train-labels-idx1-ubyte.gz"), std::string::npos) << ds.error().context;
}

TEST_F(FashionMnistFiles, TruncatedDataIsDecodeFailed) {
  auto images = idx_images(4);
  images.resize(images.size() - 100);
  write_pair(images, idx_labels(4));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("truncated"), std::string::npos) << ds.error().context;
  EXPECT_NE(ds.error().context.find("train-images-idx3-ubyte.gz"), std::string::npos);
}

TEST_F(FashionMnistFiles, TruncatedDataIsCaughtEvenWithMaxSamples) {
  auto images = idx_images(4);
  images.resize(images.size() - 1);
  write_pair(images, idx_labels(4));
  auto ds = load_fashion_mnist(dir(), split::train, {.max_samples = 1});
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
}

TEST_F(FashionMnistFiles, TruncatedHeaderIsDecodeFailed) {
  write_pair(std::vector<std::uint8_t>{0, 0, 8, 3, 0, 0}, idx_labels(1));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("header"), std::string::npos) << ds.error().context;
}

TEST_F(FashionMnistFiles, EmptyGzipIsDecodeFailed) {
  write_pair(std::vector<std::uint8_t>{}, idx_labels(1));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
}

TEST_F(FashionMnistFiles, TrailingBytesAreDecodeFailed) {
  auto labels = idx_labels(2);
  labels.push_back(3);
  write_pair(idx_images(2), labels);
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("trailing"), std::string::npos) << ds.error().context;
}

TEST_F(FashionMnistFiles, NotGzipIsDecodeFailed) {
  write_gz("train-images-idx3-ubyte.gz", idx_images(1));
  write_raw("train-labels-idx1-ubyte.gz", idx_labels(1));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("not a gzip"), std::string::npos) << ds.error().context;
  EXPECT_NE(ds.error().context.find("train-labels-idx1-ubyte.gz"), std::string::npos);
}

TEST_F(FashionMnistFiles, CorruptGzipStreamIsDecodeFailed) {
  write_gz("train-images-idx3-ubyte.gz", idx_images(2));
  write_gz("train-labels-idx1-ubyte.gz", idx_labels(2));
  // Flip bytes in the middle of the deflate stream of the images file; the CRC or inflate must fail.
  const auto path = dir_ / "train-images-idx3-ubyte.gz";
  std::vector<char> bytes(fs::file_size(path));
  {
    std::ifstream in(path, std::ios::binary);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  for (std::size_t i = 12; i < bytes.size() - 8; i += 5) {
    bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  }
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed) << ds.error().message();
}

TEST_F(FashionMnistFiles, CountMismatchIsDecodeFailed) {
  write_pair(idx_images(3), idx_labels(2));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("labels"), std::string::npos) << ds.error().context;
}

TEST_F(FashionMnistFiles, WrongImageShapeIsDecodeFailed) {
  write_pair(idx_images(2, 32, 32), idx_labels(2));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("28x28"), std::string::npos) << ds.error().context;
}

TEST_F(FashionMnistFiles, LabelOutOfRangeIsDecodeFailed) {
  auto labels = idx_labels(3);
  labels.back() = 10;
  write_pair(idx_images(3), labels);
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
  EXPECT_NE(ds.error().context.find("label 10"), std::string::npos) << ds.error().context;
}

TEST_F(FashionMnistFiles, HugeHeaderCountFailsWithoutHugeAllocation) {
  // Claims 4 billion images but holds one: must fail as truncated, not try to allocate terabytes.
  auto images = idx_images(1);
  images[4] = images[5] = images[6] = images[7] = 0xff;
  write_pair(images, idx_labels(1));
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code, errc::decode_failed);
}

// The payload of 1400 images (1.1 MB) spans two of the reader's 1 MiB chunks, and 1350 kept items end
// inside the second: the chunks must be exactly the kept bytes, in order, after one header call.
TEST_F(FashionMnistFiles, StreamingReadDeliversExactlyTheKeptBytesInOrder) {
  const auto images = idx_images(1400);
  write_pair(images, idx_labels(1400));
  const std::string path = dir() + "/train-images-idx3-ubyte.gz";
  for (const std::size_t keep : {std::size_t{0}, std::size_t{1350}}) {
    std::vector<std::uint32_t> seen_dims;
    std::vector<std::uint8_t> got;
    int chunks = 0;
    auto dims = read_idx_gz(
        path, 3, keep,
        [&](const std::vector<std::uint32_t>& d) -> prsgd::expected<void> {
          EXPECT_TRUE(got.empty()) << "the header callback comes before any payload";
          seen_dims = d;
          return {};
        },
        [&](std::span<const std::uint8_t> chunk) {
          EXPECT_LE(chunk.size(), std::size_t{1} << 20U);
          got.insert(got.end(), chunk.begin(), chunk.end());
          ++chunks;
        });
    ASSERT_TRUE(dims.has_value()) << dims.error().message();
    const std::uint32_t items = keep == 0 ? 1400U : static_cast<std::uint32_t>(keep);
    EXPECT_EQ(*dims, (std::vector<std::uint32_t>{items, 28, 28}));
    EXPECT_EQ(seen_dims, *dims);
    EXPECT_EQ(chunks, 2);
    ASSERT_EQ(got.size(), std::size_t{items} * 784U);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), images.begin() + 16)) << "keep " << keep;
    auto whole = read_idx_gz(path, 3, keep);
    ASSERT_TRUE(whole.has_value()) << whole.error().message();
    EXPECT_EQ(whole->data, got);
    EXPECT_EQ(whole->dims, *dims);
  }
  // The loader converts the same bytes chunk by chunk: check pixels on both sides of the chunk boundary.
  auto ds = load_fashion_mnist(dir(), split::train);
  ASSERT_TRUE(ds.has_value()) << ds.error().message();
  ASSERT_EQ(ds->features.size(), 1400U * 784U);
  const std::size_t chunk = std::size_t{1} << 20U;
  for (const std::size_t i : {std::size_t{0}, chunk - 1, chunk, std::size_t{1400U * 784U - 1}}) {
    const float want = (static_cast<float>(images[16 + i]) / 255.0F - 0.2860F) / 0.3530F;
    EXPECT_NEAR(ds->features[i], want, 1e-6F) << "pixel " << i;
  }
}

TEST_F(FashionMnistFiles, StreamingReadStopsAtAHeaderCallbackError) {
  write_pair(idx_images(3), idx_labels(3));
  bool payload = false;
  auto dims = read_idx_gz(
      dir() + "/train-images-idx3-ubyte.gz", 3, 0,
      [](const std::vector<std::uint32_t>&) -> prsgd::expected<void> {
        return prsgd::fail(prsgd::errc::invalid_argument, "refused");
      },
      [&](std::span<const std::uint8_t>) { payload = true; });
  ASSERT_FALSE(dims.has_value());
  EXPECT_EQ(dims.error().code, prsgd::errc::invalid_argument);
  EXPECT_FALSE(payload);
}

TEST_F(FashionMnistFiles, EnvironmentOverridesDefaultDir) {
  write_pair(idx_images(2), idx_labels(2));
  ASSERT_EQ(::setenv("PRSGD_FMNIST_DIR", dir().c_str(), 1), 0);
  EXPECT_EQ(fashion_mnist_default_dir(), dir());
  auto ds = load_fashion_mnist({}, split::train);
  ::unsetenv("PRSGD_FMNIST_DIR");
  ASSERT_TRUE(ds.has_value()) << ds.error().message();
  EXPECT_EQ(ds->size(), 2U);
  EXPECT_EQ(fashion_mnist_default_dir(), std::string{fashion_mnist_debian_dir});
}

// Needs Debian's dataset-fashion-mnist; skipped when it is not installed.
TEST(FashionMnistRealData, LoadsDebianTestSplit) {
  if (!fs::exists(std::string{fashion_mnist_debian_dir} + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  }
  auto ds = load_fashion_mnist(fashion_mnist_debian_dir, split::test);
  ASSERT_TRUE(ds.has_value()) << ds.error().message();
  EXPECT_EQ(ds->size(), 10000U);
  EXPECT_EQ(ds->features.size(), 10000U * 784U);
  std::vector<int> per_class(10, 0);
  for (auto l : ds->labels) {
    ++per_class[static_cast<std::size_t>(l)];
  }
  for (int c : per_class) {
    EXPECT_EQ(c, 1000);  // the test split is balanced
  }
  double sum = 0;
  for (float v : ds->features) {
    sum += v;
  }
  // Normalised with the train statistics, the test mean is close to (but not exactly) zero.
  EXPECT_NEAR(sum / static_cast<double>(ds->features.size()), 0.0, 0.02);
}

TEST(FashionMnistRealData, LoadsDebianTrainSplitHeaderAndPrefix) {
  if (!fs::exists(std::string{fashion_mnist_debian_dir} + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  }
  auto labels = read_idx_gz(std::string{fashion_mnist_debian_dir} + "/train-labels-idx1-ubyte.gz", 1);
  ASSERT_TRUE(labels.has_value()) << labels.error().message();
  EXPECT_EQ(labels->dims[0], 60000U);
  auto ds = load_fashion_mnist(fashion_mnist_debian_dir, split::train, {.max_samples = 500});
  ASSERT_TRUE(ds.has_value()) << ds.error().message();
  EXPECT_EQ(ds->size(), 500U);
  EXPECT_EQ(ds->name, "fashion-mnist/train");
}

// ---- the shared byte cache --------------------------------------------------------------------------------

class FashionMnistCache : public FashionMnistFiles {
 protected:
  void SetUp() override { write_pair(idx_images(5), idx_labels(5)); }
  [[nodiscard]] fs::path cache_dir() const { return dir_ / "cache"; }
  [[nodiscard]] fs::path cache_file() const { return cache_dir() / "fashion-mnist-train.u8"; }
  prsgd::expected<shared_split> load() { return load_fashion_mnist_shared(dir(), split::train, cache_dir()); }
};

TEST_F(FashionMnistCache, MappedBytesGiveTheDecodedValues) {
  auto floats = load_fashion_mnist(dir(), split::train);
  ASSERT_TRUE(floats.has_value()) << floats.error().message();
  auto shared = load();
  ASSERT_TRUE(shared.has_value()) << shared.error().message();
  const dataset& d = shared->data;
  ASSERT_TRUE(d.bytes);
  EXPECT_TRUE(d.features.empty());
  EXPECT_EQ(d.size(), floats->size());
  EXPECT_EQ(d.labels, floats->labels);
  EXPECT_EQ(d.shape, floats->shape);
  EXPECT_EQ(d.num_classes, floats->num_classes);
  std::vector<float> sample(d.sample_size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    d.copy_sample(i, sample.data());
    // Bit for bit: the same table turns the same byte into the same float.
    ASSERT_EQ(0, std::memcmp(sample.data(), floats->sample(i), sample.size() * sizeof(float))) << "sample " << i;
  }
  EXPECT_EQ(shared->cache_file, cache_file());
  EXPECT_TRUE(shared->built);
}

TEST_F(FashionMnistCache, IsBuiltOnceThenMapped) {
  auto first = load();
  ASSERT_TRUE(first.has_value()) << first.error().message();
  EXPECT_TRUE(first->built);
  const auto written = fs::last_write_time(cache_file());
  auto second = load();
  ASSERT_TRUE(second.has_value()) << second.error().message();
  EXPECT_FALSE(second->built);
  EXPECT_EQ(fs::last_write_time(cache_file()), written);
  EXPECT_EQ(second->data.labels, first->data.labels);
}

TEST_F(FashionMnistCache, TruncatedCacheIsRebuilt) {
  ASSERT_TRUE(load().has_value());
  const auto full = fs::file_size(cache_file());
  fs::resize_file(cache_file(), full - 100);
  auto again = load();
  ASSERT_TRUE(again.has_value()) << again.error().message();
  EXPECT_TRUE(again->built);
  EXPECT_EQ(fs::file_size(cache_file()), full);
  fs::resize_file(cache_file(), 10);  // not even a header
  again = load();
  ASSERT_TRUE(again.has_value()) << again.error().message();
  EXPECT_TRUE(again->built);
}

TEST_F(FashionMnistCache, CorruptCacheIsRebuilt) {
  std::vector<float> want(784);
  {
    auto first = load();
    ASSERT_TRUE(first.has_value());
    first->data.copy_sample(4, want.data());
  }
  {
    std::fstream f(cache_file(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(cache_file()) - 3));
    f.put('\x5a');
  }
  auto again = load();
  ASSERT_TRUE(again.has_value()) << again.error().message();
  EXPECT_TRUE(again->built);
  std::vector<float> got(784);
  again->data.copy_sample(4, got.data());
  EXPECT_EQ(got, want);
}

TEST_F(FashionMnistCache, ChangedSourcesMakeItStale) {
  ASSERT_TRUE(load().has_value());
  write_pair(idx_images(6), idx_labels(6));
  auto again = load();
  ASSERT_TRUE(again.has_value()) << again.error().message();
  EXPECT_TRUE(again->built);
  EXPECT_EQ(again->data.size(), 6U);
}

TEST_F(FashionMnistCache, WithoutAWritableDirectoryTheBytesArePrivate) {
  write_raw("not-a-dir", {1, 2, 3});
  auto shared = load_fashion_mnist_shared(dir(), split::train, dir_ / "not-a-dir" / "cache");
  ASSERT_TRUE(shared.has_value()) << shared.error().message();
  EXPECT_TRUE(shared->cache_file.empty());
  EXPECT_FALSE(shared->built);
  ASSERT_TRUE(shared->data.bytes);
  EXPECT_EQ(shared->data.size(), 5U);
}

TEST_F(FashionMnistCache, BadSourcesAreRefusedAsByTheFloatLoader) {
  write_pair(idx_images(5, 28, 28, 0x999), idx_labels(5));
  auto shared = load();
  ASSERT_FALSE(shared.has_value());
  EXPECT_EQ(shared.error().code, errc::decode_failed);
  EXPECT_NE(shared.error().context.find("train-images-idx3-ubyte.gz"), std::string::npos) << shared.error().context;
  EXPECT_FALSE(fs::exists(cache_file()));
}

TEST(FashionMnistCacheDir, BesideWritableDataElseUnderXdgCacheHome) {
  prsgd::test::scratch_dir data{"prsgd-fmnist-dir"};
  EXPECT_EQ(fashion_mnist_cache_dir(data.path().string()), data.path() / ".prsgd-cache");
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("XDG_CACHE_HOME", "/var/cache/somebody", 1);
  const auto system = fashion_mnist_cache_dir(fashion_mnist_debian_dir);
  EXPECT_EQ(system.parent_path(), fs::path{"/var/cache/somebody/prsgd"});
  EXPECT_EQ(system.filename().string().rfind("fashion-mnist-", 0), 0U) << system;
  if (old != nullptr) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
}

}  // namespace
