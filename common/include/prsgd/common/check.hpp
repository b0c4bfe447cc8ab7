// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sstream>
#include <string_view>

namespace prsgd::common::detail {

/// Collects a failed check's message and aborts the process in its destructor.
class check_failure {
 public:
  check_failure(std::string_view file, int line, std::string_view condition);
  check_failure(const check_failure&) = delete;
  check_failure& operator=(const check_failure&) = delete;
  [[noreturn]] ~check_failure();
  template <class T>
  check_failure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

/// Swallows the stream expression of a passing check.
struct check_voidify {
  void operator&(check_failure&) {}
};

}  // namespace prsgd::common::detail

/// Aborts with file:line and the streamed context when `cond` is false. For bugs, never for peer input.
#define PRSGD_CHECK(cond) \
  (cond)                  \
      ? (void)0           \
      : ::prsgd::common::detail::check_voidify() & ::prsgd::common::detail::check_failure(__FILE__, __LINE__, #cond)
