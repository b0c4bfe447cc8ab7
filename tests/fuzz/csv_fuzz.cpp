// SPDX-License-Identifier: Apache-2.0
// Fuzzes the `csv` data set loader. Input: parts split at the part separator: train.csv, test.csv (train.csv
// again when missing) and options, one `key=value` per line (label-column, header, classes).
// Properties: a loaded data set keeps the loader's promises (dataset_check.hpp), loading is repeatable, and
// no part loads when the shape is refused.
// Speed: the files go to a directory in memory (scratch_dir), and the train and test parts are loaded only
// when the shape loads or for 1 in 16 of the other inputs (see below).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dataset_check.hpp"
#include "fuzz_input.hpp"
#include "prsgd/algorithms/datasets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace alg = prsgd::algorithms;
  const auto parts = prsgd::fuzz::split_parts(data, size);
  const auto& dir = prsgd::fuzz::scratch_dir();
  prsgd::fuzz::write_bytes(dir / "train.csv", parts[0]);
  prsgd::fuzz::write_bytes(dir / "test.csv", parts.size() > 1 ? parts[1] : parts[0]);
  alg::dataset_request request;
  request.dir = dir;
  request.parts = alg::dataset_parts::shape;
  if (parts.size() > 2) {
    const std::string_view text(reinterpret_cast<const char*>(parts[2].data()), parts[2].size());
    std::size_t begin = 0;
    while (begin < text.size()) {
      const std::size_t end = std::min(text.find('\n', begin), text.size());
      const std::string_view line = text.substr(begin, end - begin);
      if (const auto eq = line.find('='); eq != std::string_view::npos) {
        request.options[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
      }
      begin = end + 1;
    }
  }
  // The loader reads and checks both files the same way whatever part is asked for: when the shape load
  // refuses, so do the others. Loading all three parts (and train twice) of every input would read the
  // files four times, so the train and test parts are loaded when the shape loads, and for a sample of the
  // refused inputs, to check that they refuse too.
  auto shape = alg::load_csv_dataset(request);
  if (shape) {
    prsgd::fuzz::check_loaded(*shape, request.parts);
  }
  if (!shape && !prsgd::fuzz::sampled(data, size, 16)) {
    return 0;
  }
  for (const auto p : {alg::dataset_parts::train, alg::dataset_parts::test_and_train_size}) {
    request.parts = p;
    auto loaded = alg::load_csv_dataset(request);
    PRSGD_FUZZ_CHECK(shape || !loaded, "a part loads although the data set's shape is refused");
    if (!loaded) {
      continue;
    }
    prsgd::fuzz::check_loaded(*loaded, p);
    if (p == alg::dataset_parts::train) {
      auto again = alg::load_csv_dataset(request);
      PRSGD_FUZZ_CHECK(again.has_value() && again->train->features == loaded->train->features &&
                           again->train->labels == loaded->train->labels,
                       "loading the same files twice gave different data");
    }
  }
  return 0;
}

// The seeds: ops/fuzz.sh --make-seeds writes them to tests/fuzz/corpus/csv/ from the real encoder's output.
namespace {

void make_seeds(const prsgd::fuzz::seed_sink& seed) {
  const std::string plain = "1,0.5,0.25\n0,-1.5,2\n2,3e-2,+4\n";
  const std::string header = "label,width,\"height, cm\"\n1,0.5,0.25\r\n0,-1.5,2\r\n\n";
  const std::string last = "a,b,class\n0.5,1,1\n2,3.5,0\n";
  seed("plain", prsgd::fuzz::text_bytes(plain));
  seed("header-quoted", prsgd::fuzz::join_parts({prsgd::fuzz::text_bytes(header), prsgd::fuzz::text_bytes(header)}));
  seed("label-last", prsgd::fuzz::join_parts({prsgd::fuzz::text_bytes(last), prsgd::fuzz::text_bytes(last),
                                              prsgd::fuzz::text_bytes("label-column=last\nheader=yes")}));
  seed("label-named", prsgd::fuzz::join_parts({prsgd::fuzz::text_bytes(last), prsgd::fuzz::text_bytes(last),
                                               prsgd::fuzz::text_bytes("label-column=class\nclasses=3")}));
  seed("no-header", prsgd::fuzz::join_parts({prsgd::fuzz::text_bytes(plain), prsgd::fuzz::text_bytes(plain),
                                             prsgd::fuzz::text_bytes("header=no")}));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  prsgd::fuzz::write_seeds_if_asked("csv", make_seeds);
  return 0;
}
