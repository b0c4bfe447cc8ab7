// SPDX-License-Identifier: Apache-2.0
// The unequal-weight trimmed mean's kernels (quantized_kernel) for N = 14 and 15, one per pattern of
// PRSGD_AGGREGATION_QUANTIZED_14_15, sixteen coordinates per vector (AVX-512F). Without AVX-512 this file builds
// nothing: kernels.hpp then gives the narrow table the wide name too.
#include "data/aggregation/kernels.hpp"

#if PRSGD_AGGREGATION_HAS_AVX512

namespace prsgd::algorithms::aggregation_kernels {
namespace {

#define PRSGD_AGGREGATION_KERNEL(N, A, B, C, D)                                                            \
  PRSGD_AGGREGATION_AVX512 void quantized_##N##_##A##_##B##_##C##_##D##_wide(const quantized_args& args) { \
    quantized_kernel<N, A, B, C, D, float16>(args);                                                        \
  }
PRSGD_AGGREGATION_QUANTIZED_14_15(PRSGD_AGGREGATION_KERNEL)
#undef PRSGD_AGGREGATION_KERNEL

}  // namespace

#define PRSGD_AGGREGATION_ENTRY(N, A, B, C, D) &quantized_##N##_##A##_##B##_##C##_##D##_wide,
constinit const quantized_kernels_14_15 quantized_14_15_wide{
    PRSGD_AGGREGATION_QUANTIZED_14_15(PRSGD_AGGREGATION_ENTRY)};
#undef PRSGD_AGGREGATION_ENTRY

}  // namespace prsgd::algorithms::aggregation_kernels

#endif
