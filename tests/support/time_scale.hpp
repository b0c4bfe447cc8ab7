// SPDX-License-Identifier: Apache-2.0
// The one factor every test deadline and every wall-clock bound a test asserts is multiplied by.
//
// time_scale() is the environment variable PRSGD_TEST_TIME_SCALE if set, else the build's default (CMake cache
// variable PRSGD_TEST_TIME_SCALE: 1 in normal builds, larger under ThreadSanitizer, where each `prsgd` process
// needs ~25 s to load Fashion-MNIST). ctest's TIMEOUTs are scaled by the same cache variable
// (ops/cmake/prsgd_helpers.cmake). Lower bounds ("took at least ...") are never scaled.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace prsgd::test {

/// Returns the factor applied to every deadline (>= 1).
[[nodiscard]] double time_scale();

/// Returns `d` times time_scale().
[[nodiscard]] std::chrono::milliseconds scaled(std::chrono::milliseconds d);

/// Returns scaled(`d`) as a decimal count of milliseconds, for duration options such as
/// --heartbeat-timeout-ms: a process slowed by a sanitizer or a loaded machine is not declared dead early.
[[nodiscard]] std::string scaled_ms(std::chrono::milliseconds d);

/// Polls `done` every `poll` until it returns true (true) or scaled(`timeout`) has passed (false; `done` is
/// asked one last time at the deadline). Not thread-safe beyond what `done` is.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds{20});

}  // namespace prsgd::test
