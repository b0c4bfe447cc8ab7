// SPDX-License-Identifier: Apache-2.0
// The unequal-weight full-sort kernels (weighted_kernel) for N = 1 .. 16, sixteen coordinates per vector (AVX-512F).
// Without AVX-512 this file builds nothing: kernels.hpp then gives the narrow table the wide name too.
#include "data/aggregation/kernels.hpp"

#if PRSGD_AGGREGATION_HAS_AVX512

namespace prsgd::algorithms::aggregation_kernels {
namespace {

#define PRSGD_AGGREGATION_KERNEL(N) \
  PRSGD_AGGREGATION_AVX512 void weighted_kernel_##N##_wide(const weighted_args& a) { weighted_kernel<N, float16>(a); }
PRSGD_AGGREGATION_SIZES(PRSGD_AGGREGATION_KERNEL)
#undef PRSGD_AGGREGATION_KERNEL

}  // namespace

#define PRSGD_AGGREGATION_ENTRY(N) &weighted_kernel_##N##_wide,
constinit const sort_kernels<weighted_args> weighted_kernels_wide{PRSGD_AGGREGATION_SIZES(PRSGD_AGGREGATION_ENTRY)};
#undef PRSGD_AGGREGATION_ENTRY

}  // namespace prsgd::algorithms::aggregation_kernels

#endif
