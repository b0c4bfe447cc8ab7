// SPDX-License-Identifier: Apache-2.0
// The unequal-weight trimmed mean's kernels (quantized_kernel) for N = 14 and 15, one per pattern of
// PRSGD_AGGREGATION_QUANTIZED_14_15, eight coordinates per vector: an AVX2 and a baseline clone of each, picked at
// load time.
#include "data/aggregation/kernels.hpp"

namespace prsgd::algorithms::aggregation_kernels {
namespace {

#define PRSGD_AGGREGATION_KERNEL(N, A, B, C, D)                                                           \
  PRSGD_AGGREGATION_WIDE_VECTORS void quantized_##N##_##A##_##B##_##C##_##D(const quantized_args& args) { \
    quantized_kernel<N, A, B, C, D, float8>(args);                                                        \
  }
PRSGD_AGGREGATION_QUANTIZED_14_15(PRSGD_AGGREGATION_KERNEL)
#undef PRSGD_AGGREGATION_KERNEL

}  // namespace

#define PRSGD_AGGREGATION_ENTRY(N, A, B, C, D) &quantized_##N##_##A##_##B##_##C##_##D,
constinit const quantized_kernels_14_15 quantized_14_15_narrow{
    PRSGD_AGGREGATION_QUANTIZED_14_15(PRSGD_AGGREGATION_ENTRY)};
#undef PRSGD_AGGREGATION_ENTRY

}  // namespace prsgd::algorithms::aggregation_kernels
