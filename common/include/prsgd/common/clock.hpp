// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <chrono>

namespace prsgd {

/// Supplies the current time; injected so tests can use a fake clock (Ray `src/ray/util/clock.h`).
/// Thread-safe: `now()` may be called from any thread.
class clock_source {
 public:
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<std::chrono::steady_clock, duration>;

  virtual ~clock_source() = default;
  /// Returns the current time.
  [[nodiscard]] virtual time_point now() const noexcept = 0;
};

/// Reads `std::chrono::steady_clock`.
class steady_clock_source final : public clock_source {
 public:
  [[nodiscard]] time_point now() const noexcept override {
    return std::chrono::time_point_cast<duration>(std::chrono::steady_clock::now());
  }
  /// Returns a process-wide instance.
  static steady_clock_source& instance() noexcept {
    static steady_clock_source c;
    return c;
  }
};

/// Returns time that only moves when a test calls `advance`. Thread-safe.
class fake_clock final : public clock_source {
 public:
  [[nodiscard]] time_point now() const noexcept override { return time_point{duration{ns_.load()}}; }
  /// Moves the clock forward by `d`.
  void advance(duration d) noexcept { ns_.fetch_add(d.count()); }

 private:
  std::atomic<duration::rep> ns_{1'000'000'000};
};

}  // namespace prsgd
