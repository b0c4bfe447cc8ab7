// SPDX-License-Identifier: Apache-2.0
#include "prsgd/common/rate_limiter.hpp"

#include <algorithm>

#include "prsgd/common/check.hpp"

namespace prsgd {

rate_limiter::rate_limiter(clock_source::duration window, std::uint32_t burst) : window_(window), burst_(burst) {
  PRSGD_CHECK(burst >= 1 && window.count() > 0) << "rate_limiter needs burst >= 1 and a positive window";
}

bool rate_limiter::allow(clock_source::time_point now) {
  const mutex_lock lock{mu_};
  if (!started_ || now - window_start_ >= window_) {
    started_ = true;
    window_start_ = now;
    passed_ = 0;
    report_ += held_;
    held_ = 0;
  }
  if (passed_ < burst_) {
    ++passed_;
    return true;
  }
  ++held_;
  ++suppressed_;
  return false;
}

std::string rate_limiter::suffix() {
  const mutex_lock lock{mu_};
  if (report_ == 0) {
    return {};
  }
  const auto seconds = std::max<long long>(1, std::chrono::duration_cast<std::chrono::seconds>(window_).count());
  std::string out =
      " (and " + group_thousands(report_) + " more like it in the last " + std::to_string(seconds) + " s)";
  report_ = 0;
  return out;
}

std::uint64_t rate_limiter::suppressed() const {
  const mutex_lock lock{mu_};
  return suppressed_;
}

std::string group_thousands(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  const std::size_t lead = digits.size() % 3;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (i + 3 - lead) % 3 == 0) {
      out.push_back(',');
    }
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace prsgd
