// SPDX-License-Identifier: Apache-2.0
// The .npy reader and the `npy` data set: good files of every supported layout, and malformed ones, each
// refused with one line that names the file.
#include "prsgd/algorithms/npy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "files.hpp"
#include "prsgd/algorithms/datasets.hpp"

namespace prsgd::algorithms {
namespace {

namespace fs = std::filesystem;

template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) {
    std::memcpy(out.data(), v.data(), out.size());
  }
  return out;
}

void write(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// An .npy image with a hand-written header text (version 1.0), for malformed headers.
std::vector<std::uint8_t> raw_npy(const std::string& header, std::size_t data_bytes, std::uint8_t major = 1) {
  std::vector<std::uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', major, 0};
  if (major == 1) {
    out.push_back(static_cast<std::uint8_t>(header.size() & 0xFFU));
    out.push_back(static_cast<std::uint8_t>(header.size() >> 8U));
  } else {
    for (int i = 0; i < 4; ++i) {
      out.push_back(static_cast<std::uint8_t>((header.size() >> (8U * static_cast<unsigned>(i))) & 0xFFU));
    }
  }
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

std::string error_of(const expected<loaded_dataset>& r) { return r ? std::string{"(no error)"} : r.error().context; }

class NpyTest : public ::testing::Test {
 protected:
  fs::path file(const std::string& name) const { return dir_.path() / name; }

  // Writes a consistent data set: `n_train`/`n_test` samples of `dims` (after N) as float32 with labels i % 3.
  void write_set(const std::vector<std::size_t>& dims, std::size_t n_train = 6, std::size_t n_test = 3) {
    for (const auto& [split, n] : {std::pair{"train", n_train}, std::pair{"test", n_test}}) {
      std::size_t per = 1;
      for (auto d : dims) {
        per *= d;
      }
      std::vector<float> x(n * per);
      for (std::size_t i = 0; i < x.size(); ++i) {
        x[i] = static_cast<float>(i) * 0.5F;
      }
      std::vector<std::int64_t> y(n);
      for (std::size_t i = 0; i < n; ++i) {
        y[i] = static_cast<std::int64_t>(i % 3);
      }
      std::vector<std::size_t> shape{n};
      shape.insert(shape.end(), dims.begin(), dims.end());
      write(file(std::string(split) + "_x.npy"), encode_npy("<f4", shape, bytes_of(x)));
      write(file(std::string(split) + "_y.npy"), encode_npy("<i8", {n}, bytes_of(y)));
    }
  }

  expected<loaded_dataset> load(dataset_parts parts = dataset_parts::train) const {
    dataset_request r;
    r.dir = dir_.path();
    r.parts = parts;
    r.options = options_;
    return load_npy_dataset(r);
  }

  prsgd::test::scratch_dir dir_{"prsgd-data"};
  std::map<std::string, std::string, std::less<>> options_;
};

TEST_F(NpyTest, EncodedArraysReadBackWithHeadersNumpyWrites) {
  const std::vector<std::int32_t> v{1, -2, 3, 4, 5, 6};
  write(file("a.npy"), encode_npy("<i4", {2, 3}, bytes_of(v)));
  auto a = read_npy(file("a.npy"));
  ASSERT_TRUE(a) << a.error().message();
  EXPECT_EQ(a->header.kind, 'i');
  EXPECT_EQ(a->header.item_size, 4);
  EXPECT_EQ(a->header.shape, (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(a->header.data_offset % 64, 0U) << "data aligned like NumPy's files";
  EXPECT_EQ(a->data, bytes_of(v));

  // Exactly what numpy 1.24 writes for np.save(f, np.arange(3, dtype='<u2')), and versions 2.0 and 3.0.
  for (std::uint8_t major : {1, 2, 3}) {
    const std::string h = "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }";
    std::string padded = h + std::string(64 - (h.size() + 1 + (major == 1 ? 10 : 12)) % 64, ' ') + "\n";
    auto img = raw_npy(padded, 0, major);
    for (std::uint16_t x : {0, 1, 2}) {
      img.push_back(static_cast<std::uint8_t>(x));
      img.push_back(0);
    }
    auto h2 = parse_npy_header(img, "v.npy");
    ASSERT_TRUE(h2) << h2.error().message();
    EXPECT_EQ(h2->shape, std::vector<std::size_t>{3});
    EXPECT_EQ(h2->data_offset, img.size() - 6);
  }
  // A 0-d array and a bool array parse too.
  EXPECT_TRUE(parse_npy_header(raw_npy("{'descr': '|b1', 'fortran_order': False, 'shape': ()}", 1), "b.npy"));
}

TEST_F(NpyTest, MalformedHeadersAreRefusedNamingTheFile) {
  struct bad_case {
    std::vector<std::uint8_t> image;
    const char* needle;
  };
  const std::vector<bad_case> cases = {
      {{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0}, "\\x93NUMPY"},
      {raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 4), "format version 4.0"},
      {raw_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16), "Fortran order"},
      {raw_npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8), "big-endian"},
      {raw_npy("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16), "unsupported dtype '<c8'"},
      {raw_npy("{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", 24), "unsupported dtype"},
      {raw_npy("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", 4), "unsupported dtype"},
      {raw_npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16), "unsupported dtype"},
      {raw_npy("{'descr': '<f4', 'shape': (2,), }", 8), "lacks"},
      {raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8), "unexpected or repeated key"},
      {raw_npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8), "repeated key"},
      {raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", 8), "non-negative integers"},
      {raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", 8), "must be a tuple"},
      {raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) ", 8), "expected ',' or '}'"},
      {raw_npy("{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", 8), "expected ':' after 'descr'"},
      {raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999)}", 0),
       "overflows"},
  };
  for (const auto& c : cases) {
    auto h = parse_npy_header(c.image, "bad.npy");
    ASSERT_FALSE(h) << c.needle;
    EXPECT_EQ(h.error().code, errc::decode_failed);
    EXPECT_NE(h.error().context.find("bad.npy"), std::string::npos) << h.error().context;
    EXPECT_NE(h.error().context.find(c.needle), std::string::npos) << h.error().context;
    EXPECT_EQ(h.error().context.find('\n'), std::string::npos) << h.error().context;
  }
  // A header length beyond the file.
  auto img = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 0);
  img.resize(30);
  auto h = parse_npy_header(img, "short.npy");
  ASSERT_FALSE(h);
  EXPECT_NE(h.error().context.find("truncated header"), std::string::npos) << h.error().context;
}

TEST_F(NpyTest, TruncatedFilesAndTrailingBytesAreRefused) {
  const std::vector<float> v{1, 2, 3, 4};
  auto img = encode_npy("<f4", {4}, bytes_of(v));
  img.pop_back();
  write(file("short.npy"), img);
  auto a = read_npy(file("short.npy"));
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().context.find("short.npy: truncated"), std::string::npos) << a.error().context;
  img.push_back(0);
  img.push_back(0);
  write(file("long.npy"), img);
  a = read_npy(file("long.npy"));
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().context.find("long.npy: 1 bytes after the array"), std::string::npos) << a.error().context;
  write(file("tiny.npy"), {0x93, 'N', 'U'});
  EXPECT_FALSE(read_npy_header(file("tiny.npy")));
  auto missing = read_npy(file("missing.npy"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::io_error);
}

TEST_F(NpyTest, FeatureShapesBecomeChannelsHeightWidth) {
  const std::vector<std::pair<std::vector<std::size_t>, std::array<int, 3>>> cases = {
      {{}, {1, 1, 1}}, {{5}, {1, 1, 5}}, {{4, 3}, {1, 4, 3}}, {{2, 4, 3}, {2, 4, 3}}};
  for (const auto& [dims, shape] : cases) {
    write_set(dims);
    auto d = load();
    ASSERT_TRUE(d) << d.error().message();
    EXPECT_EQ(d->shape, shape);
    EXPECT_EQ(d->num_classes, 3);
    EXPECT_EQ(d->train_size, 6U);
    ASSERT_TRUE(d->train);
    EXPECT_FALSE(d->test);
    EXPECT_EQ(d->train->size(), 6U);
    EXPECT_EQ(d->train->features.size(), 6U * d->train->sample_size());
    EXPECT_FLOAT_EQ(d->train->features.back(), 0.5F * static_cast<float>(d->train->features.size() - 1));
    EXPECT_EQ(d->train->labels, (std::vector<std::int32_t>{0, 1, 2, 0, 1, 2}));
  }
  auto t = load(dataset_parts::test_and_train_size);
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->train_size, 6U);
  EXPECT_FALSE(t->train);
  ASSERT_TRUE(t->test);
  EXPECT_EQ(t->test->size(), 3U);
}

TEST_F(NpyTest, Uint8FeaturesAreScaledToUnitRangeAndFloat64IsNarrowed) {
  write_set({2});
  write(file("train_x.npy"),
        encode_npy("|u1", {6, 2}, std::vector<std::uint8_t>{0, 255, 51, 102, 0, 0, 1, 2, 3, 4, 5, 6}));
  auto d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_FLOAT_EQ(d->train->features[0], 0.0F);
  EXPECT_FLOAT_EQ(d->train->features[1], 1.0F);
  EXPECT_FLOAT_EQ(d->train->features[2], 0.2F);
  const std::vector<double> x{0.25, -1.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  write(file("train_x.npy"), encode_npy("<f8", {6, 2}, bytes_of(x)));
  d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_FLOAT_EQ(d->train->features[1], -1.5F);
  // Labels of any integer type: uint8 (N,) and int32 (N, 1).
  write(file("train_y.npy"), encode_npy("|u1", {6}, std::vector<std::uint8_t>{4, 0, 0, 0, 0, 0}));
  write(file("test_y.npy"), encode_npy("<i4", {3, 1}, bytes_of(std::vector<std::int32_t>{0, 1, 1})));
  d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->num_classes, 5) << "the largest label of both splits + 1";
}

TEST_F(NpyTest, BadDataSetsAreRefusedWithTheFileAndTheProblem) {
  struct bad_case {
    const char* file;
    std::vector<std::uint8_t> image;
    const char* needle;
  };
  const std::vector<bad_case> cases = {
      {"train_x.npy", encode_npy("<i8", {6, 2}, std::vector<std::uint8_t>(96)),
       "features must be float32, float64 or uint8"},
      {"train_x.npy", encode_npy("<f4", {6, 2, 2, 2, 2}, std::vector<std::uint8_t>(6 * 16 * 4)), "1 to 4 dimensions"},
      {"train_x.npy", encode_npy("<f4", {0, 2}, {}), "holds no samples"},
      {"train_x.npy", encode_npy("<f4", {5, 2}, std::vector<std::uint8_t>(40)), "has 6 labels but"},
      {"train_x.npy",
       encode_npy("<f4", {6, 2}, bytes_of(std::vector<float>{1, 2, std::nanf(""), 0, 0, 0, 0, 0, 0, 0, 0, 0})),
       "sample 1 has a NaN or infinite value"},
      {"train_x.npy", encode_npy("<f8", {6, 2}, bytes_of(std::vector<double>{1e300, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})),
       "beyond float32's range"},
      {"test_x.npy", encode_npy("<f4", {3, 3}, std::vector<std::uint8_t>(36)), "samples are 1x1x3 but"},
      {"train_y.npy", encode_npy("<f4", {6}, std::vector<std::uint8_t>(24)), "labels must be integers"},
      {"train_y.npy", encode_npy("<i8", {6, 2}, std::vector<std::uint8_t>(96)), "shape (N,) or (N, 1)"},
      {"test_y.npy", encode_npy("<i8", {3}, bytes_of(std::vector<std::int64_t>{0, -1, 0})),
       "label -1 at row 1 is negative"},
      {"test_y.npy", encode_npy("<u8", {3}, bytes_of(std::vector<std::uint64_t>{0, 1ULL << 40U, 0})), "too large"},
  };
  for (const auto& c : cases) {
    write_set({2});
    write(file(c.file), c.image);
    auto d = load();
    ASSERT_FALSE(d) << c.needle;
    EXPECT_NE(error_of(d).find(c.file), std::string::npos) << error_of(d);
    EXPECT_NE(error_of(d).find(c.needle), std::string::npos) << error_of(d);
    EXPECT_EQ(error_of(d).find('\n'), std::string::npos);
  }
  write_set({2});
  fs::remove(file("test_y.npy"));
  EXPECT_NE(error_of(load()).find("test_y.npy: no such file"), std::string::npos) << error_of(load());
}

TEST_F(NpyTest, ClassesOptionFixesTheCountAndRefusesLabelsBeyondIt) {
  write_set({2});
  options_["classes"] = "10";
  auto d = load();
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->num_classes, 10);
  options_["classes"] = "2";
  EXPECT_NE(error_of(load()).find("train_y.npy: label 2 at row 2 is not below classes=2"), std::string::npos)
      << error_of(load());
  options_["classes"] = "zero";
  EXPECT_NE(error_of(load()).find("classes must be an integer"), std::string::npos);
  options_.clear();
  options_["label-column"] = "0";
  EXPECT_NE(error_of(load()).find("data set 'npy' has no option 'label-column' (it takes: classes)"), std::string::npos)
      << error_of(load());
}

TEST_F(NpyTest, ShapeOnlyReadsHeadersAndLabels) {
  write_set({4, 4});
  // Features that would be refused when read: the shape check does not read them.
  write(file("train_x.npy"),
        encode_npy("<f4", {6, 4, 4}, bytes_of(std::vector<float>(96, std::numeric_limits<float>::infinity()))));
  auto d = load(dataset_parts::shape);
  ASSERT_TRUE(d) << d.error().message();
  EXPECT_EQ(d->shape, (std::array<int, 3>{1, 4, 4}));
  EXPECT_EQ(d->num_classes, 3);
  EXPECT_EQ(d->train_size, 6U);
  EXPECT_FALSE(d->train);
  EXPECT_FALSE(d->test);
  EXPECT_FALSE(load(dataset_parts::train));
}

TEST_F(NpyTest, NeedsADirectory) {
  dataset_request r;
  auto d = load_npy_dataset(r);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().context.find("--data-dir"), std::string::npos);
}

}  // namespace
}  // namespace prsgd::algorithms
