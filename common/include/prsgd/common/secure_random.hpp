// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

namespace prsgd {

/// Returns 64 bits from the kernel's CSPRNG (getrandom(2)), never 0; for secrets such as session tokens
/// and nonces that another party must not guess. Blocks only until the kernel's pool is initialised at boot;
/// aborts with a message if the system call fails, since no secret can be made without it.
[[nodiscard]] std::uint64_t secure_random_u64();

}  // namespace prsgd
