// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/mutex.hpp"

namespace prsgd {

/// Rate-limits one family of log lines caused by remote input (malformed messages, refused claims), so a
/// peer that sends 50,000 bad messages a second costs a few lines, not 50,000. In each window of `window`
/// the first `burst` lines pass; the rest are only counted, and the first line let through after the window
/// ends says how many were held back: "... (and 49,812 more like it in the last 10 s)".
///
/// Thread-safe: `allow` and `suffix` may be called from any thread. Time is passed in, so tests drive it.
/// Usage (the suffix belongs to the line `allow` let through; take it right after):
///   if (limiter.allow(clock.now())) { PRSGD_LOG(warn, c) << "bad header from " << peer << limiter.suffix(); }
class rate_limiter {
 public:
  /// Lets `burst` lines through per `window`. @pre burst >= 1, window > 0
  explicit rate_limiter(clock_source::duration window = std::chrono::seconds{10}, std::uint32_t burst = 5);
  rate_limiter(const rate_limiter&) = delete;
  rate_limiter& operator=(const rate_limiter&) = delete;

  /// Returns true when a line may be logged at `now`; otherwise counts it as held back.
  [[nodiscard]] bool allow(clock_source::time_point now);
  /// Returns " (and N more like it in the last S s)" for the lines held back in the window before the line
  /// `allow` just let through, or "" when none were; each count is reported once.
  [[nodiscard]] std::string suffix();
  /// Returns the lines held back since construction.
  [[nodiscard]] std::uint64_t suppressed() const;

 private:
  const clock_source::duration window_;
  const std::uint32_t burst_;
  mutable mutex mu_;
  bool started_ PRSGD_GUARDED_BY(mu_) = false;
  clock_source::time_point window_start_ PRSGD_GUARDED_BY(mu_){};
  std::uint32_t passed_ PRSGD_GUARDED_BY(mu_) = 0;
  std::uint64_t held_ PRSGD_GUARDED_BY(mu_) = 0;    // held back in the current window
  std::uint64_t report_ PRSGD_GUARDED_BY(mu_) = 0;  // held back in the previous window, not yet reported
  std::uint64_t suppressed_ PRSGD_GUARDED_BY(mu_) = 0;
};

/// Returns `n` with thousands separators: 49812 -> "49,812".
[[nodiscard]] std::string group_thousands(std::uint64_t n);

}  // namespace prsgd
