// SPDX-License-Identifier: Apache-2.0
// The layers' BLAS glue: the GEMM (sgemm through the system BLAS, or Eigen's product without one) and
// OpenBLAS's thread limit. The only layer file compiled with EIGEN_USE_BLAS (nn.cmake).
#include "layer_kernels.hpp"

#include <algorithm>
#include <cstdlib>

#include "prsgd/common/check.hpp"

#if PRSGD_NN_BLAS
// OpenBLAS's thread control, if the BLAS loaded at run time is OpenBLAS (weak: absent otherwise).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));
// sgemm_, the Fortran BLAS entry point, is declared by Eigen/Core under EIGEN_USE_BLAS (which nn.cmake
// sets together with PRSGD_NN_BLAS).
#endif

namespace prsgd::algorithms::layer_kernels {

// Training runs one model per compute-pool thread, so a multi-threaded BLAS would oversubscribe the
// cores. Unless OPENBLAS_NUM_THREADS says otherwise, OpenBLAS is limited to the calling thread.
void limit_blas_threads() {
#if PRSGD_NN_BLAS
  static const bool once = [] {
    if (openblas_set_num_threads != nullptr && std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
      openblas_set_num_threads(1);
    }
    return true;
  }();
  (void)once;
#endif
}

// Computes C = A·B (accumulate: C += A·B) for row-major C (`c_ld` floats between rows). Calls sgemm
// directly: Eigen's `dst.noalias() = A*B` first zeroes dst and then calls sgemm with beta = 1, which
// costs a memset and a read of dst per product; beta = 0 writes dst once.
void gemm(const gemm_operand& a, const gemm_operand& b, float* c, index c_ld, bool accumulate) {
  PRSGD_CHECK(a.cols == b.rows) << "gemm: inner dimensions " << a.cols << " and " << b.rows << " differ";
  const index m = a.rows;
  const index n = b.cols;
  const index k = a.cols;
  if (m == 0 || n == 0) {
    return;
  }
  if (k == 0) {
    if (!accumulate) {
      for (index r = 0; r < m; ++r) {
        std::fill(c + r * c_ld, c + r * c_ld + n, 0.0F);
      }
    }
    return;
  }
#if PRSGD_NN_BLAS
  // Row-major C = A·B is column-major C^T = B^T·A^T: swap the operands; each stored row-major matrix
  // read column-major is its transpose, so the transpose flags carry over unchanged.
  const char ta = b.trans ? 'T' : 'N';
  const char tb = a.trans ? 'T' : 'N';
  const int mm = static_cast<int>(n);
  const int nn = static_cast<int>(m);
  const int kk = static_cast<int>(k);
  const int lda = static_cast<int>(b.ld);
  const int ldb = static_cast<int>(a.ld);
  const int ldc = static_cast<int>(c_ld);
  const float one = 1.0F;
  const float beta = accumulate ? 1.0F : 0.0F;
  sgemm_(&ta, &tb, &mm, &nn, &kk, &one, b.data, &lda, a.data, &ldb, &beta, c, &ldc);
#else
  using strided = Eigen::Map<const tensor, 0, Eigen::OuterStride<> >;
  using col_strided = Eigen::Map<const Eigen::MatrixXf, 0, Eigen::OuterStride<> >;  // a transposed row-major view
  Eigen::Map<tensor, 0, Eigen::OuterStride<> > cm(c, m, n, Eigen::OuterStride<>(c_ld));
  auto run = [&](const auto& am, const auto& bm) {
    if (accumulate) {
      cm.noalias() += am * bm;
    } else {
      cm.noalias() = am * bm;
    }
  };
  auto with_b = [&](const auto& am) {
    if (b.trans) {
      run(am, col_strided(b.data, b.rows, b.cols, Eigen::OuterStride<>(b.ld)));
    } else {
      run(am, strided(b.data, b.rows, b.cols, Eigen::OuterStride<>(b.ld)));
    }
  };
  if (a.trans) {
    with_b(col_strided(a.data, a.rows, a.cols, Eigen::OuterStride<>(a.ld)));
  } else {
    with_b(strided(a.data, a.rows, a.cols, Eigen::OuterStride<>(a.ld)));
  }
#endif
}

}  // namespace prsgd::algorithms::layer_kernels
