// SPDX-License-Identifier: Apache-2.0
// The unequal-weight window kernels (weighted_window_kernel), one per entry of window_shapes, sixteen coordinates per
// vector (AVX-512F). Without AVX-512 this file builds nothing: kernels.hpp then gives the narrow table the wide name
// too.
#include "data/aggregation/kernels.hpp"

#if PRSGD_AGGREGATION_HAS_AVX512

namespace prsgd::algorithms::aggregation_kernels {
namespace {

#define PRSGD_AGGREGATION_KERNEL(N, LO, HI)                                                        \
  PRSGD_AGGREGATION_AVX512 void weighted_window_##N##_##LO##_##HI##_wide(const weighted_args& a) { \
    weighted_window_kernel<N, LO, HI, float16>(a);                                                 \
  }
PRSGD_AGGREGATION_WINDOWS(PRSGD_AGGREGATION_KERNEL)
#undef PRSGD_AGGREGATION_KERNEL

}  // namespace

#define PRSGD_AGGREGATION_ENTRY(N, LO, HI) &weighted_window_##N##_##LO##_##HI##_wide,
constinit const window_kernels<weighted_args> weighted_windows_wide{PRSGD_AGGREGATION_WINDOWS(PRSGD_AGGREGATION_ENTRY)};
#undef PRSGD_AGGREGATION_ENTRY

}  // namespace prsgd::algorithms::aggregation_kernels

#endif
