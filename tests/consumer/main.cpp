// SPDX-License-Identifier: Apache-2.0
#include <cstdio>

#include "prsgd/common/expected.hpp"

int main() {
  prsgd::expected<int> v = 42;
  std::printf("prsgd consumer: find_package(prsgd) works, value %d\n", *v);
  return *v == 42 ? 0 : 1;
}
