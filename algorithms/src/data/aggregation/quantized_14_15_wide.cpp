// SPDX-License-Identifier: Apache-2.0
// The unequal-weight trimmed mean's kernels (quantized_kernel) for N = 14 and 15, one per pattern of
// PRSGD_AGGREGATION_QUANTIZED_14_15, sixteen coordinates per vector (AVX-512F). Without AVX-512 this file builds
// nothing: kernels.hpp then gives the narrow table the wide name too.
#include "data/aggregation/kernels.hpp"

#if PRSGD_AGGREGATION_HAS_AVX512

namespace prsgd::algorithms::aggregation_kernels {
namespace {
PRSGD_AGGREGATION_QUANTIZED_14_15(PRSGD_AGGREGATION_QUANTIZED_WIDE)
}  // namespace
constinit const quantized_kernels_14_15 quantized_14_15_wide{
    PRSGD_AGGREGATION_QUANTIZED_14_15(PRSGD_AGGREGATION_QUANTIZED_WIDE_ENTRY)};
}  // namespace prsgd::algorithms::aggregation_kernels

#endif
