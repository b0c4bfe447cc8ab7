// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "prsgd/runtime/runtime.hpp"

namespace prsgd::test {

/// Counts; throws on demand; records lifecycle events into a shared log.
class counter final : public actor {
 public:
  explicit counter(int start, std::shared_ptr<std::vector<std::string>> log = nullptr)
      : value_(start), log_(std::move(log)) {}
  void on_start() override { note("start"); }
  void on_stop(const error& reason) override { note("stop:" + std::string{to_string(reason.code)}); }

  int add(int d) {
    value_ += d;
    return value_;
  }
  [[nodiscard]] int get() const { return value_; }
  int boom(const std::string& why) { throw std::runtime_error(why); }
  void stop_me() { quit(); }
  expected<int> checked(int d) {
    if (d < 0) {
      return fail(errc::invalid_argument, "negative");
    }
    return add(d);
  }

 private:
  void note(const std::string& s) {
    if (log_) {
      log_->push_back(s);
    }
  }
  int value_;
  std::shared_ptr<std::vector<std::string>> log_;
};

}  // namespace prsgd::test
