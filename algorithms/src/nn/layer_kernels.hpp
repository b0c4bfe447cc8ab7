// SPDX-License-Identifier: Apache-2.0
// What the layer files share (blas.cpp, kernels.cpp, layer.cpp, linear.cpp, conv2d.cpp, pooling.cpp,
// batch_norm.cpp, residual.cpp): tensor views, the GEMM through the system BLAS, the element-wise
// kernels and the input shape check. Private.
#pragma once

#include <Eigen/Core>

#include <cstddef>
#include <random>

#include "prsgd/algorithms/layers.hpp"

// The library is built for the x86-64 baseline (SSE2) unless PRSGD_X86_LEVEL raises it. The im2col / col2im
// copies are bound by stores, and the 2x2 max pool's row loops only vectorise with SSE4 blends and 64-bit
// compares, so on x86-64 these also get AVX2 and AVX-512 clones picked at load time (same results: selects
// and copies, no FMA). Other architectures compile the plain loops.
// Not under ThreadSanitizer: target_clones resolvers are IFUNCs that the loader runs during relocation,
// before the TSan runtime is initialised, and crash there (every TSan binary linking this library did).
#if defined(__SANITIZE_THREAD__) || !defined(__x86_64__)
#define PRSGD_NN_WIDE_VECTORS
#else
#define PRSGD_NN_WIDE_VECTORS __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

namespace prsgd::algorithms::layer_kernels {

using index = Eigen::Index;
using vec_map = Eigen::Map<Eigen::VectorXf>;
using const_vec_map = Eigen::Map<const Eigen::VectorXf>;
using mat_map = Eigen::Map<tensor>;
using const_mat_map = Eigen::Map<const tensor>;

/// Limits OpenBLAS to the calling thread, once per process, unless OPENBLAS_NUM_THREADS is set (blas.cpp).
void limit_blas_threads();

// Row-major operands for `gemm`: `rows` x `cols` as used (after the transpose), `ld` floats between
// consecutive stored rows, `trans` if the stored matrix is the transpose of the one used.
struct gemm_operand {
  const float* data;
  index rows;
  index cols;
  index ld;
  bool trans;
};

/// Computes C = A·B (accumulate: C += A·B) for row-major C (`c_ld` floats between rows) (blas.cpp).
void gemm(const gemm_operand& a, const gemm_operand& b, float* c, index c_ld, bool accumulate);

/// Adds bias[r] to row r of the `rows` x `cols` block at `y` (`ld` floats between rows).
void add_row_bias(float* y, index rows, index cols, index ld, const float* bias);

/// Writes (accumulate: adds) the row sums of the `rows` x `cols` block at `x` to `out`.
void row_sums(const float* x, index rows, index cols, index ld, float* out, bool accumulate);

/// Fills p[0, n) with U(-bound, bound), PyTorch's default initialisation of weights and biases.
void fill_uniform(float* p, std::size_t n, float bound, std::mt19937_64& rng);

/// Writes out[i] = max(in[i], 0), with NaN giving 0.
void relu_forward(const float* __restrict in, float* __restrict out, index n);

/// Writes dx[i] = y[i] > 0 ? dy[i] : 0, the ReLU's input gradient from its output y.
void relu_backward(const float* __restrict y, const float* __restrict dy, float* __restrict dx, index n);

/// Returns the batch size of `x` for input shape `in` (columns / plane); checks that `x` fits it.
index batch_of(const tensor& x, shape3 in);

}  // namespace prsgd::algorithms::layer_kernels
