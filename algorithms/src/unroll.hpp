// SPDX-License-Identifier: Apache-2.0
#pragma once

// PRSGD_UNROLL(n) asks the compiler to unroll the next loop n times (`#pragma GCC unroll n`, which GCC and
// clang both read). The sorting networks and the register-blocked convolutions rely on it for their speed.
// Builds that turn PRSGD_KERNEL_O3 off (the sanitizer presets) define PRSGD_NO_FORCED_UNROLL: there the
// forced unrolls only cost compile time (the robust aggregation file took 104 s instead of 23 s under
// ASan + UBSan), and the results are the same bits either way.
#if defined(PRSGD_NO_FORCED_UNROLL)
#define PRSGD_UNROLL(n)
#else
#define PRSGD_UNROLL_PRAGMA(text) _Pragma(#text)
#define PRSGD_UNROLL(n) PRSGD_UNROLL_PRAGMA(GCC unroll n)
#endif
