// SPDX-License-Identifier: Apache-2.0
// The promises every data set loader makes about what it returns (dataset_registry.hpp), checked on each
// data set the npy and csv fuzz targets manage to load.
#pragma once

#include <cmath>
#include <cstddef>

#include "fuzz_input.hpp"
#include "prsgd/algorithms/dataset_registry.hpp"

namespace prsgd::fuzz {

/// Checks one returned split against the loader's summary.
inline void check_split(const algorithms::loaded_dataset& l, const algorithms::dataset& d) {
  PRSGD_FUZZ_CHECK(d.shape == l.shape && d.num_classes == l.num_classes, "a split disagrees with the summary");
  PRSGD_FUZZ_CHECK(d.size() > 0, "a loaded split is empty");
  PRSGD_FUZZ_CHECK(d.features.size() == d.size() * d.sample_size(), "features and labels disagree in count");
  for (const auto label : d.labels) {
    PRSGD_FUZZ_CHECK(label >= 0 && label < d.num_classes, "a label is outside [0, classes)");
  }
  for (const float v : d.features) {
    PRSGD_FUZZ_CHECK(std::isfinite(v), "a loaded feature is NaN or infinite");
  }
}

/// Checks what a loader returned for `parts`.
inline void check_loaded(const algorithms::loaded_dataset& l, algorithms::dataset_parts parts) {
  PRSGD_FUZZ_CHECK(l.num_classes >= 1, "a loaded data set has no class");
  PRSGD_FUZZ_CHECK(l.shape[0] >= 1 && l.shape[1] >= 1 && l.shape[2] >= 1, "a sample dimension is below 1");
  if (parts == algorithms::dataset_parts::train) {
    PRSGD_FUZZ_CHECK(l.train.has_value() && !l.test.has_value(), "asked for train, got other parts");
    check_split(l, *l.train);
    PRSGD_FUZZ_CHECK(l.train_size == l.train->size(), "train_size is not the training split's size");
  } else if (parts == algorithms::dataset_parts::test_and_train_size) {
    PRSGD_FUZZ_CHECK(l.test.has_value() && !l.train.has_value(), "asked for test, got other parts");
    check_split(l, *l.test);
  }
}

}  // namespace prsgd::fuzz
