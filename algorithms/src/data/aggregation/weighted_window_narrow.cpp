// SPDX-License-Identifier: Apache-2.0
// The unequal-weight window kernels (weighted_window_kernel), one per entry of window_shapes, eight coordinates per
// vector: an AVX2 and a baseline clone of each, picked at load time.
#include "data/aggregation/kernels.hpp"

namespace prsgd::algorithms::aggregation_kernels {
namespace {

#define PRSGD_AGGREGATION_KERNEL(N, LO, HI)                                                       \
  PRSGD_AGGREGATION_WIDE_VECTORS void weighted_window_##N##_##LO##_##HI(const weighted_args& a) { \
    weighted_window_kernel<N, LO, HI, float8>(a);                                                 \
  }
PRSGD_AGGREGATION_WINDOWS(PRSGD_AGGREGATION_KERNEL)
#undef PRSGD_AGGREGATION_KERNEL

}  // namespace

#define PRSGD_AGGREGATION_ENTRY(N, LO, HI) &weighted_window_##N##_##LO##_##HI,
constinit const window_kernels<weighted_args> weighted_windows_narrow{
    PRSGD_AGGREGATION_WINDOWS(PRSGD_AGGREGATION_ENTRY)};
#undef PRSGD_AGGREGATION_ENTRY

}  // namespace prsgd::algorithms::aggregation_kernels
