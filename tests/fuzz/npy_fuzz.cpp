// SPDX-License-Identifier: Apache-2.0
// Fuzzes the .npy reader and the `npy` data set loader. Input: parts split at the part separator; part 0
// is an .npy image, given to parse_npy_header in memory and, as a file, to read_npy_header and read_npy.
// With two or more parts, parts 0..3 are train_x.npy, train_y.npy, test_x.npy and test_y.npy of a data set
// directory (test_* repeat train_* when missing), loaded with load_npy_dataset.
// Properties: the file readers agree with the in-memory parser (a file reads exactly when its header parses
// and its size is the header's), encode_npy round-trips what was read, a loaded data set keeps the
// loader's promises (dataset_check.hpp), and no part loads when the shape is refused.
// Speed: the files go to a directory in memory (scratch_dir). Part 0 is read back from a file when its header
// parses in memory and for 1 in 4 of the inputs it does not (a sample decided by the input's hash, so a
// reproducer replays the same checks); the train and test parts are loaded when the shape loads and for
// 1 in 16 of the inputs it does not. Every data set input still goes through the file readers.
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

/// Checks one .npy image; `full`: also when the in-memory parser refuses it, that the file readers do.
void check_image(std::span<const std::uint8_t> image, bool full) {
  auto header = alg::parse_npy_header(image, "x.npy");
  if (!header && !full) {
    return;
  }
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
  // Part 0 goes through the file readers whenever its header parses in memory, and for 1 in 4 of the
  // inputs whose header does not (most mutated inputs are no .npy image at all).
  const bool full = prsgd::fuzz::sampled(data, size, 4);
  check_image(parts[0], full);
  if (parts.size() < 2) {
    return 0;
  }
  const auto& dir = prsgd::fuzz::scratch_dir();
  const char* names[] = {"train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy"};
  for (std::size_t i = 0; i < 4; ++i) {
    prsgd::fuzz::write_bytes(dir / names[i], i < parts.size() ? parts[i] : parts[i - 2]);
  }
  // The loader reads and checks both splits' headers and labels the same way whatever part is asked for,
  // and only then reads the features of the part asked for: when the shape load refuses, so do the others.
  // Loading all three parts of every input triples the files read, so the train and test parts are loaded
  // when the shape loads, and for a sample of the refused inputs, to check that they refuse too.
  const auto load = [&](alg::dataset_parts p) {
    alg::dataset_request request;
    request.dir = dir;
    request.parts = p;
    if (parts.size() > 4 && !parts[4].empty()) {
      request.options["classes"] = std::string(reinterpret_cast<const char*>(parts[4].data()), parts[4].size());
    }
    auto loaded = alg::load_npy_dataset(request);
    if (loaded) {
      prsgd::fuzz::check_loaded(*loaded, p);
    }
    return loaded.has_value();
  };
  const bool shape_loads = load(alg::dataset_parts::shape);
  if (shape_loads || prsgd::fuzz::sampled(data, size, 16)) {
    for (const auto p : {alg::dataset_parts::train, alg::dataset_parts::test_and_train_size}) {
      const bool loads = load(p);
      PRSGD_FUZZ_CHECK(shape_loads || !loads, "a part loads although the data set's shape is refused");
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
