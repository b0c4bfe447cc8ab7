// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/model_inputs.hpp"

#include <png.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "prsgd/algorithms/fashion_mnist.hpp"

namespace prsgd::cli {
namespace {

class ModelInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("prsgd_inputs_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<unsigned char>& bytes) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::string write_png(const std::string& name, int width, int height, bool color) {
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    image.width = static_cast<png_uint_32>(width);
    image.height = static_cast<png_uint_32>(height);
    image.format = color ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    std::vector<unsigned char> pixels(PNG_IMAGE_SIZE(image));
    for (std::size_t i = 0; i < pixels.size(); ++i) {
      pixels[i] = static_cast<unsigned char>(i % 256);
    }
    const auto p = (dir_ / name).string();
    EXPECT_NE(png_image_write_to_file(&image, p.c_str(), 0, pixels.data(), 0, nullptr), 0);
    return p;
  }

  std::filesystem::path dir_;
};

// An NPY v1 file: magic, version, header padded so that the data starts 64-byte aligned.
std::vector<unsigned char> npy(const std::string& descr, const std::string& shape,
                               const std::vector<unsigned char>& data, bool fortran = false) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape + ", }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::vector<unsigned char> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<unsigned char>(header.size() & 0xFFU));
  out.push_back(static_cast<unsigned char>(header.size() >> 8U));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<unsigned char> float_bytes(std::size_t n, float start) {
  std::vector<unsigned char> out(n * 4);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = start + static_cast<float>(i);
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

const algorithms::shape3 fmnist{1, 28, 28};

TEST_F(ModelInputsTest, NpyFloatBatchesAreTakenAsTheyAre) {
  auto one =
      read_model_input(write("one.npy", npy("<f4", "(28, 28)", float_bytes(784, 0.5F))), fmnist, "fashion-mnist");
  ASSERT_TRUE(one) << one.error().message();
  EXPECT_EQ(one->count, 1U);
  EXPECT_FLOAT_EQ(one->values[3], 3.5F);
  auto batch = read_model_input(write("b.npy", npy("<f4", "(3, 1, 28, 28)", float_bytes(3 * 784, 0))), fmnist, "x");
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->count, 3U);
  EXPECT_EQ(batch->values.size(), 3U * 784U);
  std::vector<unsigned char> doubles(2 * 784 * 8);
  const double d = 0.25;
  for (std::size_t i = 0; i < 2 * 784; ++i) {
    std::memcpy(doubles.data() + 8 * i, &d, 8);
  }
  auto f8 = read_model_input(write("d.npy", npy("<f8", "(2, 28, 28)", doubles)), fmnist, "x");
  ASSERT_TRUE(f8);
  EXPECT_EQ(f8->count, 2U);
  EXPECT_FLOAT_EQ(f8->values.back(), 0.25F);
}

TEST_F(ModelInputsTest, NpyPixelsAreNormalisedLikeTheTrainingData) {
  std::vector<unsigned char> px(784, 255);
  auto r = read_model_input(write("u8.npy", npy("|u1", "(1, 28, 28)", px)), fmnist, "fashion-mnist");
  ASSERT_TRUE(r);
  EXPECT_FLOAT_EQ(r->values[0], (1.0F - algorithms::fashion_mnist_mean) / algorithms::fashion_mnist_std);
}

TEST_F(ModelInputsTest, NpyThatDoesNotFitIsRefusedInOneLine) {
  auto wrong = read_model_input(write("w.npy", npy("<f4", "(32, 32)", float_bytes(1024, 0))), fmnist, "x");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().code, errc::invalid_argument);
  EXPECT_NE(wrong.error().context.find("(32, 32) does not fit the model input 1x28x28"), std::string::npos)
      << wrong.error().context;
  auto fortran = read_model_input(write("f.npy", npy("<f4", "(28, 28)", float_bytes(784, 0), true)), fmnist, "x");
  ASSERT_FALSE(fortran);
  EXPECT_NE(fortran.error().context.find("Fortran"), std::string::npos);
  auto dtype = read_model_input(write("i.npy", npy("<i4", "(28, 28)", float_bytes(784, 0))), fmnist, "x");
  ASSERT_FALSE(dtype);
  EXPECT_NE(dtype.error().context.find("not supported"), std::string::npos);
  auto truncated = read_model_input(write("t.npy", npy("<f4", "(28, 28)", float_bytes(700, 0))), fmnist, "x");
  ASSERT_FALSE(truncated);
  EXPECT_EQ(truncated.error().code, errc::decode_failed);
  EXPECT_FALSE(parse_npy({1, 2, 3}));
  auto bytes = npy("<f4", "(28, 28)", float_bytes(784, 0));
  bytes.resize(20);
  EXPECT_FALSE(parse_npy(bytes));
}

TEST_F(ModelInputsTest, PngMustHaveTheModelsSizeAndChannels) {
  auto gray = read_model_input(write_png("g.png", 28, 28, false), fmnist, "other");
  ASSERT_TRUE(gray) << gray.error().message();
  EXPECT_EQ(gray->count, 1U);
  EXPECT_FLOAT_EQ(gray->values[5], 5.0F / 255.0F);
  auto big = read_model_input(write_png("big.png", 32, 28, false), fmnist, "fashion-mnist");
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().context.find("is 32x28 pixels; the model takes 28x28 (resize it first)"), std::string::npos)
      << big.error().context;
  auto rgb = read_model_input(write_png("c.png", 28, 28, true), fmnist, "fashion-mnist");
  ASSERT_FALSE(rgb);
  EXPECT_NE(rgb.error().context.find("colour"), std::string::npos);
  auto planes = read_model_input(write_png("rgb.png", 4, 2, true), {3, 2, 4}, "other");
  ASSERT_TRUE(planes);
  EXPECT_FLOAT_EQ(planes->values[1], 3.0F / 255.0F) << "channel-major: red of the second pixel";
  EXPECT_FLOAT_EQ(planes->values[8], 1.0F / 255.0F) << "green of the first pixel";
  auto junk = read_model_input(write("j.png", {1, 2, 3, 4}), fmnist, "x");
  ASSERT_FALSE(junk);
  EXPECT_EQ(junk.error().code, errc::decode_failed);
}

TEST_F(ModelInputsTest, UncompressedIdxImagesAndOtherInputs) {
  std::vector<unsigned char> idx = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28};
  idx.resize(16 + 2 * 784, 0);
  auto r = read_model_input(write("images-idx3-ubyte", idx), fmnist, "fashion-mnist");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->count, 2U);
  EXPECT_FLOAT_EQ(r->values[0], -algorithms::fashion_mnist_mean / algorithms::fashion_mnist_std);
  auto wav = read_model_input(write("a.wav", {0}), fmnist, "fashion-mnist");
  ASSERT_FALSE(wav);
  EXPECT_NE(wav.error().context.find("keyword model"), std::string::npos);
  auto missing = read_model_input((dir_ / "none.png").string(), fmnist, "fashion-mnist");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::io_error);
}

}  // namespace
}  // namespace prsgd::cli
