// SPDX-License-Identifier: Apache-2.0
#include "time_scale.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#ifndef PRSGD_TEST_TIME_SCALE_DEFAULT
#define PRSGD_TEST_TIME_SCALE_DEFAULT 1
#endif

namespace prsgd::test {

namespace {

double read_time_scale() {
  double scale = PRSGD_TEST_TIME_SCALE_DEFAULT;
  if (const char* s = std::getenv("PRSGD_TEST_TIME_SCALE"); s != nullptr && *s != '\0') {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end != s && *end == '\0' && std::isfinite(v)) {
      scale = v;
    } else {
      std::fprintf(stderr, "PRSGD_TEST_TIME_SCALE=%s is not a number: using %g\n", s, scale);
    }
  }
  // A factor below 1 would shorten the deadlines the tests were written with.
  scale = std::max(scale, 1.0);
  if (scale != 1.0) {
    std::fprintf(stderr, "prsgd tests: every deadline is scaled by %g (PRSGD_TEST_TIME_SCALE)\n", scale);
  }
  return scale;
}

}  // namespace

double time_scale() {
  static const double scale = read_time_scale();
  return scale;
}

std::chrono::milliseconds scaled(std::chrono::milliseconds d) {
  return std::chrono::milliseconds{
      static_cast<std::chrono::milliseconds::rep>(std::ceil(static_cast<double>(d.count()) * time_scale()))};
}

std::string scaled_ms(std::chrono::milliseconds d) { return std::to_string(scaled(d).count()); }

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout, std::chrono::milliseconds poll) {
  const auto until = std::chrono::steady_clock::now() + scaled(timeout);
  while (std::chrono::steady_clock::now() < until) {
    if (done()) {
      return true;
    }
    std::this_thread::sleep_for(poll);  // polling a condition with a deadline, not synchronising by sleep
  }
  return done();
}

}  // namespace prsgd::test
