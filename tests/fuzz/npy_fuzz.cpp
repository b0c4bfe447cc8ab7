// SPDX-License-Identifier: Apache-2.0
// Fuzzes the .npy reader and the `npy` data set loader. Input: parts split at the part separator; part 0
// is an .npy image, given to parse_npy_header in memory and, as a file, to read_npy_header and read_npy.
// With two or more parts, parts 0..3 are train_x.npy, train_y.npy, test_x.npy and test_y.npy of a data set
// directory (test_* repeat train_* when missing), loaded with load_npy_dataset.
// Properties: the file readers agree with the in-memory parser (a file reads exactly when its header parses
// and its size is the header's), encode_npy round-trips what was read, and a loaded data set keeps the
// loader's promises (dataset_check.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "dataset_check.hpp"
#include "fuzz_input.hpp"
#include "prsgd/algorithms/datasets.hpp"
#include "prsgd/algorithms/npy.hpp"

namespace {

namespace alg = prsgd::algorithms;

void check_image(std::span<const std::uint8_t> image) {
  auto header = alg::parse_npy_header(image, "x.npy");
  bool exact = false;
  if (header) {
    PRSGD_FUZZ_CHECK(header->data_offset <= image.size(), "the data offset is beyond the image");
    exact = image.size() - header->data_offset == header->elements() * static_cast<std::size_t>(header->item_size);
  }
  const auto file = prsgd::fuzz::scratch_dir() / "x.npy";
  prsgd::fuzz::write_bytes(file, image);
  auto from_file = alg::read_npy(file);
  auto header_only = alg::read_npy_header(file);
  PRSGD_FUZZ_CHECK(from_file.has_value() == exact, "read_npy and parse_npy_header disagree");
  PRSGD_FUZZ_CHECK(header_only.has_value() == exact, "read_npy_header and parse_npy_header disagree");
  if (!exact) {
    return;
  }
  PRSGD_FUZZ_CHECK(from_file->header.descr == header->descr && from_file->header.shape == header->shape &&
                       from_file->header.data_offset == header->data_offset,
                   "the file reader read another header");
  PRSGD_FUZZ_CHECK(std::equal(from_file->data.begin(), from_file->data.end(),
                              image.begin() + static_cast<std::ptrdiff_t>(header->data_offset)),
                   "the file reader read other data");
  const std::vector<std::uint8_t> encoded = alg::encode_npy(header->descr, header->shape, from_file->data);
  auto again = alg::parse_npy_header(encoded, "again.npy");
  PRSGD_FUZZ_CHECK(again.has_value(), "encode_npy wrote a header the reader refuses");
  PRSGD_FUZZ_CHECK(again->descr == header->descr && again->shape == header->shape && again->kind == header->kind &&
                       again->item_size == header->item_size,
                   "an .npy header changed in a round trip");
  PRSGD_FUZZ_CHECK(encoded.size() - again->data_offset == from_file->data.size(), "encode_npy lost data");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parts = prsgd::fuzz::split_parts(data, size);
  check_image(parts[0]);
  if (parts.size() < 2) {
    return 0;
  }
  const auto& dir = prsgd::fuzz::scratch_dir();
  const char* names[] = {"train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy"};
  for (std::size_t i = 0; i < 4; ++i) {
    prsgd::fuzz::write_bytes(dir / names[i], i < parts.size() ? parts[i] : parts[i - 2]);
  }
  for (const auto p : {alg::dataset_parts::shape, alg::dataset_parts::train, alg::dataset_parts::test_and_train_size}) {
    alg::dataset_request request;
    request.dir = dir;
    request.parts = p;
    if (parts.size() > 4 && !parts[4].empty()) {
      request.options["classes"] = std::string(reinterpret_cast<const char*>(parts[4].data()), parts[4].size());
    }
    if (auto loaded = alg::load_npy_dataset(request)) {
      prsgd::fuzz::check_loaded(*loaded, p);
    }
  }
  return 0;
}

// The seeds: ops/fuzz.sh --make-seeds writes them to tests/fuzz/corpus/npy/ from the real encoder's output.
namespace {

using bytes = std::vector<std::uint8_t>;

void make_seeds(const prsgd::fuzz::seed_sink& seed) {
  const std::array<float, 6> x{0.0F, 0.5F, 1.0F, -0.5F, 0.25F, 2.0F};
  const std::array<double, 3> xd{0.5, -1.5, 3.0};
  const std::array<std::int64_t, 3> y{0, 2, 1};
  const std::array<std::uint8_t, 3> y8{1, 0, 1};
  const bytes x_f4 = alg::encode_npy("<f4", {3, 2}, prsgd::fuzz::raw_bytes(x.data(), sizeof x));
  const bytes x_f8 = alg::encode_npy("<f8", {3}, prsgd::fuzz::raw_bytes(xd.data(), sizeof xd));
  const bytes x_u1 = alg::encode_npy("|u1", {3, 1, 2}, bytes{0, 255, 128, 7, 9, 11});
  const bytes y_i8 = alg::encode_npy("<i8", {3}, prsgd::fuzz::raw_bytes(y.data(), sizeof y));
  const bytes y_u1 = alg::encode_npy("|u1", {3, 1}, prsgd::fuzz::raw_bytes(y8.data(), sizeof y8));
  const bytes scalar = alg::encode_npy("<i4", {}, bytes{5, 0, 0, 0});
  seed("x-f4", x_f4);
  seed("x-f8", x_f8);
  seed("scalar-i4", scalar);
  seed("bool", alg::encode_npy("|b1", {2, 2}, bytes{1, 0, 0, 1}));
  seed("dataset-f4-i8", prsgd::fuzz::join_parts({x_f4, y_i8}));
  seed("dataset-u1-u1-split", prsgd::fuzz::join_parts({x_u1, y_u1, x_u1, y_i8}));
  seed("dataset-f8-classes", prsgd::fuzz::join_parts({x_f8, y_i8, x_f8, y_u1, prsgd::fuzz::text_bytes("4")}));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  prsgd::fuzz::write_seeds_if_asked("npy", make_seeds);
  return 0;
}
