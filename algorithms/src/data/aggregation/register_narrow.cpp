// SPDX-License-Identifier: Apache-2.0
// The equal-weight full-sort kernels (register_kernel) for N = 1 .. 16, eight coordinates per vector: an AVX2 and a
// baseline clone of each, picked at load time.
#include "data/aggregation/kernels.hpp"

namespace prsgd::algorithms::aggregation_kernels {
namespace {

#define PRSGD_AGGREGATION_KERNEL(N) \
  PRSGD_AGGREGATION_WIDE_VECTORS void register_kernel_##N(const register_args& a) { register_kernel<N, float8>(a); }
PRSGD_AGGREGATION_SIZES(PRSGD_AGGREGATION_KERNEL)
#undef PRSGD_AGGREGATION_KERNEL

}  // namespace

#define PRSGD_AGGREGATION_ENTRY(N) &register_kernel_##N,
constinit const sort_kernels<register_args> register_kernels_narrow{PRSGD_AGGREGATION_SIZES(PRSGD_AGGREGATION_ENTRY)};
#undef PRSGD_AGGREGATION_ENTRY

}  // namespace prsgd::algorithms::aggregation_kernels
