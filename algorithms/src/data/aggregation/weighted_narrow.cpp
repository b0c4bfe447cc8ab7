// SPDX-License-Identifier: Apache-2.0
// The unequal-weight full-sort kernels (weighted_kernel) for N = 1 .. 16, eight coordinates per vector: an AVX2 and a
// baseline clone of each, picked at load time.
#include "data/aggregation/kernels.hpp"

namespace prsgd::algorithms::aggregation_kernels {
namespace {

#define PRSGD_AGGREGATION_KERNEL(N) \
  PRSGD_AGGREGATION_WIDE_VECTORS void weighted_kernel_##N(const weighted_args& a) { weighted_kernel<N, float8>(a); }
PRSGD_AGGREGATION_SIZES(PRSGD_AGGREGATION_KERNEL)
#undef PRSGD_AGGREGATION_KERNEL

}  // namespace

#define PRSGD_AGGREGATION_ENTRY(N) &weighted_kernel_##N,
constinit const sort_kernels<weighted_args> weighted_kernels_narrow{PRSGD_AGGREGATION_SIZES(PRSGD_AGGREGATION_ENTRY)};
#undef PRSGD_AGGREGATION_ENTRY

}  // namespace prsgd::algorithms::aggregation_kernels
