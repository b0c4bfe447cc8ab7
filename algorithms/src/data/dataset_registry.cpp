// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/dataset_registry.hpp"

#include <limits>

#include "prsgd/algorithms/datasets.hpp"

namespace prsgd::algorithms {

namespace {

std::string shape_text(const std::array<int, 3>& s) {
  return std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
}

expected<void> check_split(std::string_view name, const char* which, const dataset& d, const loaded_dataset& out) {
  const std::string what = "data set '" + std::string(name) + "': the " + which + " split";
  if (d.shape != out.shape) {
    return fail(errc::invalid_argument,
                what + " has samples of " + shape_text(d.shape) + ", the data set says " + shape_text(out.shape));
  }
  if (d.num_classes != out.num_classes) {
    return fail(errc::invalid_argument, what + " has " + std::to_string(d.num_classes) + " classes, the data set " +
                                            std::to_string(out.num_classes));
  }
  if (d.bytes) {
    if (d.bytes->data == nullptr || !d.features.empty()) {
      return fail(errc::invalid_argument, what + " holds its samples as bytes without the bytes, or also as floats");
    }
  } else if (d.features.size() != d.labels.size() * d.sample_size()) {
    return fail(errc::invalid_argument, what + " has " + std::to_string(d.features.size()) + " features for " +
                                            std::to_string(d.labels.size()) + " samples of " +
                                            std::to_string(d.sample_size()));
  }
  for (std::size_t i = 0; i < d.labels.size(); ++i) {
    if (d.labels[i] < 0 || d.labels[i] >= d.num_classes) {
      return fail(errc::invalid_argument, what + ": sample " + std::to_string(i) + " has label " +
                                              std::to_string(d.labels[i]) + ", outside 0.." +
                                              std::to_string(d.num_classes - 1));
    }
  }
  return {};
}

}  // namespace

expected<void> check_dataset_options(const dataset_request& request, std::string_view data_set,
                                     std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : request.options) {
    bool ok = false;
    std::string list;
    for (auto k : known) {
      ok = ok || key == k;
      list += (list.empty() ? "" : ", ") + std::string(k);
    }
    if (!ok) {
      return fail(errc::invalid_argument, "data set '" + std::string(data_set) + "' has no option '" + key + "'" +
                                              (list.empty() ? " (it takes none)" : " (it takes: " + list + ")"));
    }
  }
  return {};
}

dataset_registry& dataset_registry::instance() {
  // Built on first use (thread-safe static init); defined out of line so one copy exists per process
  // even when plugins are loaded with dlopen.
  static dataset_registry* registry = [] {
    auto* r = new dataset_registry();  // never destroyed: plugins may still use it during exit
    register_builtin_datasets(*r);
    return r;
  }();
  return *registry;
}

expected<void> dataset_registry::add(std::string name, std::string description, dataset_loader loader) {
  if (name.empty() || !loader) {
    return fail(errc::invalid_argument, "a data set needs a name and a loader");
  }
  return entries_.add(std::move(name), std::move(description), std::move(loader));
}

expected<void> dataset_registry::remove(std::string_view name) { return entries_.remove(name); }

expected<loaded_dataset> dataset_registry::load(std::string_view name, const dataset_request& request) const {
  const auto loader = entries_.find(name);
  if (!loader) {
    return entries_.missing(name);
  }
  auto out = (*loader)(request);
  if (!out) {
    return out;
  }
  const std::string what = "data set '" + std::string(name) + "'";
  const auto& s = out->shape;
  if (s[0] <= 0 || s[1] <= 0 || s[2] <= 0 ||
      static_cast<long long>(s[0]) * s[1] * s[2] > std::numeric_limits<int>::max()) {
    return fail(errc::invalid_argument, what + " has an invalid sample shape " + shape_text(s));
  }
  if (out->num_classes <= 0) {
    return fail(errc::invalid_argument, what + " has no classes");
  }
  if (request.parts == dataset_parts::train) {
    if (!out->train || out->train->size() == 0) {
      return fail(errc::invalid_argument, what + " returned no training samples");
    }
    PRSGD_TRY(check_split(name, "training", *out->train, *out));
    out->train_size = out->train->size();
  }
  if (request.parts == dataset_parts::test_and_train_size) {
    if (!out->test || out->test->size() == 0) {
      return fail(errc::invalid_argument, what + " returned no test samples");
    }
    if (out->train_size == 0) {
      return fail(errc::invalid_argument, what + " did not say how many training samples it has");
    }
    if (!out->train_labels) {
      auto train_request = request;
      train_request.parts = dataset_parts::train;
      auto train = load(name, train_request);
      PRSGD_TRY(train);
      out->train_labels = std::move(train->train->labels);
    }
    if (out->train_labels->size() != out->train_size) {
      return fail(errc::invalid_argument, what + " has " + std::to_string(out->train_size) + " training samples but " +
                                              std::to_string(out->train_labels->size()) + " training labels");
    }
    PRSGD_TRY(check_split(name, "test", *out->test, *out));
  }
  return out;
}

bool dataset_registry::contains(std::string_view name) const { return entries_.contains(name); }

std::vector<std::string> dataset_registry::names() const { return entries_.names(); }

expected<std::string> dataset_registry::description(std::string_view name) const { return entries_.description(name); }

}  // namespace prsgd::algorithms
