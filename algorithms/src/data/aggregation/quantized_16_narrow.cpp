// SPDX-License-Identifier: Apache-2.0
// The unequal-weight trimmed mean's kernels (quantized_kernel) for N = 16, one per pattern of
// PRSGD_AGGREGATION_QUANTIZED_16, eight coordinates per vector: an AVX2 and a baseline clone of each, picked at
// load time.
#include "data/aggregation/kernels.hpp"

namespace prsgd::algorithms::aggregation_kernels {
namespace {
PRSGD_AGGREGATION_QUANTIZED_16(PRSGD_AGGREGATION_QUANTIZED_NARROW)
}  // namespace
constinit const quantized_kernels_16 quantized_16_narrow{
    PRSGD_AGGREGATION_QUANTIZED_16(PRSGD_AGGREGATION_QUANTIZED_NARROW_ENTRY)};
}  // namespace prsgd::algorithms::aggregation_kernels
