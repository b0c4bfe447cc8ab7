// SPDX-License-Identifier: Apache-2.0
#include "prsgd/common/secure_random.hpp"

#include "prsgd/common/check.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace prsgd {

std::uint64_t secure_random_u64() {
  std::uint64_t v = 0;
  while (v == 0) {
    const ssize_t n = ::getrandom(&v, sizeof v, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    PRSGD_CHECK(n == static_cast<ssize_t>(sizeof v)) << "getrandom failed: " << std::strerror(errno);
  }
  return v;
}

}  // namespace prsgd
