// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "prsgd/common/mutex.hpp"

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms::detail {

/// Maps names to a description and a value: what model_registry and dataset_registry share. Errors name the
/// entry as "<kind> '<name>'", e.g. "model 'x' is already registered".
/// Thread-safe: every member function takes an internal mutex; values are copied out, never used under it.
template <class Value>
class named_entries {
 public:
  /// Creates an empty map whose errors call its entries `kind` ("model", "data set").
  explicit named_entries(std::string kind) : kind_(std::move(kind)) {}

  /// Adds `value` under `name`; returns already_exists if the name is taken.
  [[nodiscard]] expected<void> add(std::string name, std::string description, Value value) {
    const mutex_lock lock(mutex_);
    if (entries_.contains(name)) {
      return fail(errc::already_exists, kind_ + " '" + name + "' is already registered");
    }
    entries_.emplace(std::move(name), std::make_pair(std::move(description), std::move(value)));
    return {};
  }
  /// Removes `name`; returns not_found if it is not there.
  [[nodiscard]] expected<void> remove(std::string_view name) {
    const mutex_lock lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return missing(name);
    }
    entries_.erase(it);
    return {};
  }
  /// Returns a copy of the value under `name`, or nullopt.
  [[nodiscard]] std::optional<Value> find(std::string_view name) const {
    const mutex_lock lock(mutex_);
    auto it = entries_.find(name);
    return it == entries_.end() ? std::nullopt : std::optional<Value>{it->second.second};
  }
  /// Returns whether `name` is there.
  [[nodiscard]] bool contains(std::string_view name) const {
    const mutex_lock lock(mutex_);
    return entries_.find(name) != entries_.end();
  }
  /// Returns the names, sorted.
  [[nodiscard]] std::vector<std::string> names() const {
    const mutex_lock lock(mutex_);
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& entry : entries_) {
      out.push_back(entry.first);
    }
    return out;
  }
  /// Returns the description given to `add`, or not_found.
  [[nodiscard]] expected<std::string> description(std::string_view name) const {
    const mutex_lock lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return missing(name);
    }
    return it->second.first;
  }
  /// Returns not_found "no <kind> '<name>'".
  [[nodiscard]] prsgd::unexpected missing(std::string_view name) const {
    return fail(errc::not_found, "no " + kind_ + " '" + std::string(name) + "'");
  }

 private:
  const std::string kind_;
  mutable mutex mutex_;
  std::map<std::string, std::pair<std::string, Value>, std::less<>> entries_ PRSGD_GUARDED_BY(mutex_);
};

}  // namespace prsgd::algorithms::detail
