// SPDX-License-Identifier: Apache-2.0
#include "prsgd/common/check.hpp"

#include <cstdio>
#include <cstdlib>

namespace prsgd::common::detail {

check_failure::check_failure(std::string_view file, int line, std::string_view condition) {
  stream_ << file << ":" << line << ": check failed: " << condition << " ";
}

check_failure::~check_failure() {
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace prsgd::common::detail
