// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/layers.hpp"

#include "prsgd/algorithms/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace prsgd::algorithms {
namespace {

// Whether the library's AVX-512 paths (direct convolutions, fused pooling) run on this CPU; never elsewhere.
bool cpu_has_avx512f() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx512f") != 0;
#else
  return false;
#endif
}

// Owns flat buffers for one layer and checks its backward pass against central differences of
// L = sum(r .* forward(x)) with a fixed random r, for the input and for every parameter.
class gradient_checker {
 public:
  explicit gradient_checker(std::unique_ptr<layer> l, std::uint64_t seed = 7) : layer_(std::move(l)), rng_(seed) {
    params_.assign(layer_->num_params(), 0.0F);
    grads_.assign(layer_->num_params(), 0.0F);
    buffers_.assign(layer_->num_buffers(), 0.0F);
    layer_->bind(params_.data(), grads_.data(), buffers_.data());
    layer_->reset_parameters(rng_);
  }

  layer& get() { return *layer_; }
  std::vector<float>& params() { return params_; }
  std::vector<float>& buffers() { return buffers_; }

  tensor random_input(int batch, float min_abs = 0.0F) {
    const shape3 in = layer_->input_shape();
    tensor x(in.channels, batch * static_cast<Eigen::Index>(in.plane()));
    std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      float v = dist(rng_);
      if (std::abs(v) < min_abs) {
        v = v < 0 ? v - min_abs : v + min_abs;
      }
      x.data()[i] = v;
    }
    return x;
  }

  double loss(const tensor& x, bool training) {
    tensor y;
    layer_->forward(x, y, training);
    double sum = 0.0;
    for (Eigen::Index i = 0; i < y.size(); ++i) {
      sum += static_cast<double>(r_.data()[i]) * static_cast<double>(y.data()[i]);
    }
    return sum;
  }

  // Runs the check; `eps` is the finite-difference step.
  void check(tensor x, bool training, float eps = 1e-2F, double atol = 3e-3, double rtol = 1e-2) {
    tensor y;
    layer_->forward(x, y, training);
    const shape3 out = layer_->output_shape();
    ASSERT_EQ(y.rows(), out.channels);
    ASSERT_EQ(y.cols() % static_cast<Eigen::Index>(out.plane()), 0);
    r_.resize(y.rows(), y.cols());
    std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
    for (Eigen::Index i = 0; i < r_.size(); ++i) {
      r_.data()[i] = dist(rng_);
    }
    std::fill(grads_.begin(), grads_.end(), 0.0F);
    tensor dx;
    layer_->forward(x, y, training);
    layer_->backward(x, y, r_, &dx);
    ASSERT_EQ(dx.rows(), x.rows());
    ASSERT_EQ(dx.cols(), x.cols());
    const std::vector<float> analytic_params = grads_;
    for (std::size_t i : sample_indices(static_cast<std::size_t>(x.size()))) {
      const float saved = x.data()[i];
      x.data()[i] = saved + eps;
      const double up = loss(x, training);
      x.data()[i] = saved - eps;
      const double down = loss(x, training);
      x.data()[i] = saved;
      const double numeric = (up - down) / (2.0 * eps);
      EXPECT_NEAR(dx.data()[i], numeric, atol + rtol * std::abs(numeric))
          << "input " << i << " of " << layer_->describe();
    }
    for (std::size_t i : sample_indices(params_.size())) {
      const float saved = params_[i];
      params_[i] = saved + eps;
      const double up = loss(x, training);
      params_[i] = saved - eps;
      const double down = loss(x, training);
      params_[i] = saved;
      const double numeric = (up - down) / (2.0 * eps);
      EXPECT_NEAR(analytic_params[i], numeric, atol + rtol * std::abs(numeric))
          << "param " << i << " of " << layer_->describe();
    }
  }

 private:
  std::vector<std::size_t> sample_indices(std::size_t n) {
    std::vector<std::size_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0U);
    if (n > 120) {
      std::shuffle(idx.begin(), idx.end(), rng_);
      idx.resize(120);
    }
    return idx;
  }

  std::unique_ptr<layer> layer_;
  std::mt19937_64 rng_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<float> buffers_;
  tensor r_;
};

TEST(NnLayersTest, LinearMatchesExplicitProduct) {
  gradient_checker g(make_linear({3, 1, 1}, 2));
  // weight (2 x 3) row-major, then bias (2).
  g.params() = {1, 2, 3, 4, 5, 6, 0.5F, -1};
  tensor x(3, 2);
  x << 1, 0, 1, 1, 2, -1;
  tensor y;
  g.get().forward(x, y, true);
  tensor expected(2, 2);
  expected << 1 + 2 + 6 + 0.5F, 0 + 2 - 3 + 0.5F, 4 + 5 + 12 - 1, 0 + 5 - 6 - 1;
  EXPECT_TRUE(y.isApprox(expected)) << y;
}

TEST(NnLayersTest, LinearBackwardMatchesFiniteDifferences) {
  gradient_checker g(make_linear({7, 1, 1}, 5));
  g.check(g.random_input(3), true);
}

TEST(NnLayersTest, ReluBackwardMatchesFiniteDifferences) {
  gradient_checker g(make_relu({2, 3, 3}));
  g.check(g.random_input(2, 0.05F), true);
}

// Direct (naive) convolution as an independent reference for the im2col path.
tensor naive_conv(const tensor& x, const std::vector<float>& p, shape3 in, int out_c, int k, int s, int pad,
                  bool bias) {
  const int oh = (in.height + 2 * pad - k) / s + 1;
  const int ow = (in.width + 2 * pad - k) / s + 1;
  const auto batch = x.cols() / static_cast<Eigen::Index>(in.plane());
  tensor y = tensor::Zero(out_c, batch * oh * ow);
  for (Eigen::Index b = 0; b < batch; ++b) {
    for (int o = 0; o < out_c; ++o) {
      for (int i = 0; i < oh; ++i) {
        for (int j = 0; j < ow; ++j) {
          float acc = bias ? p[static_cast<std::size_t>(out_c * in.channels * k * k + o)] : 0.0F;
          for (int c = 0; c < in.channels; ++c) {
            for (int ki = 0; ki < k; ++ki) {
              for (int kj = 0; kj < k; ++kj) {
                const int hi = i * s + ki - pad;
                const int wi = j * s + kj - pad;
                if (hi < 0 || hi >= in.height || wi < 0 || wi >= in.width) {
                  continue;
                }
                acc += p[static_cast<std::size_t>(((o * in.channels + c) * k + ki) * k + kj)] *
                       x(c, b * static_cast<Eigen::Index>(in.plane()) + hi * in.width + wi);
              }
            }
          }
          y(o, b * oh * ow + i * ow + j) = acc;
        }
      }
    }
  }
  return y;
}

struct conv_case {
  shape3 in;
  int out;
  int k;
  int s;
  int p;
  bool bias;
};

class NnConvTest : public ::testing::TestWithParam<conv_case> {};

TEST_P(NnConvTest, ForwardMatchesNaiveConvolution) {
  const conv_case c = GetParam();
  gradient_checker g(make_conv2d(c.in, c.out, c.k, c.s, c.p, c.bias));
  const tensor x = g.random_input(3);
  tensor y;
  g.get().forward(x, y, true);
  const tensor ref = naive_conv(x, g.params(), c.in, c.out, c.k, c.s, c.p, c.bias);
  ASSERT_EQ(y.rows(), ref.rows());
  ASSERT_EQ(y.cols(), ref.cols());
  EXPECT_LT((y - ref).cwiseAbs().maxCoeff(), 1e-5F);
}

TEST_P(NnConvTest, BackwardMatchesFiniteDifferences) {
  const conv_case c = GetParam();
  gradient_checker g(make_conv2d(c.in, c.out, c.k, c.s, c.p, c.bias));
  g.check(g.random_input(2), true);
}

INSTANTIATE_TEST_SUITE_P(Geometries, NnConvTest,
                         ::testing::Values(conv_case{{2, 5, 5}, 3, 3, 1, 1, true},    // same padding
                                           conv_case{{1, 6, 6}, 2, 5, 1, 2, true},    // the CNN's 5x5 pad 2
                                           conv_case{{2, 6, 5}, 3, 3, 2, 1, false},   // stride 2, odd width
                                           conv_case{{3, 5, 5}, 2, 1, 2, 0, false},   // 1x1 projection
                                           conv_case{{1, 4, 4}, 2, 3, 1, 0, true},    // valid padding
                                           conv_case{{1, 2, 2}, 1, 5, 1, 2, true}));  // kernel wider than input

// The CNN's second convolution with a batch that takes several im2col chunks (one sample each).
TEST(NnLayersTest, ConvOverSeveralChunksMatchesNaiveAndFiniteDifferences) {
  const conv_case c{{16, 14, 14}, 32, 5, 1, 2, true};
  gradient_checker g(make_conv2d(c.in, c.out, c.k, c.s, c.p, c.bias));
  const tensor x = g.random_input(7);
  tensor y;
  g.get().forward(x, y, true);
  const tensor ref = naive_conv(x, g.params(), c.in, c.out, c.k, c.s, c.p, c.bias);
  ASSERT_EQ(y.cols(), ref.cols());
  EXPECT_LT((y - ref).cwiseAbs().maxCoeff(), 1e-4F);
  g.check(x, true, 1e-2F, 3e-3, 1e-2);
}

// The conv2d implementations PRSGD_NN_CONV picks: im2col + GEMM ("gemm"), the direct AVX-512 kernels
// ("direct": where they apply, stride-1 "same" geometry, cout % 16 == 0, AVX-512F) and, unset, also
// Winograd F(2x2, 5x5) for the 5x5 forward and input-gradient convolutions with 16 or 32 input channels
// (and their weight gradient on even sides with cout % 32 == 0).
enum class conv_path { gemm, direct, fastest };

// Sets PRSGD_NN_CONV for `path` (conv2d reads it when built), restoring it when destroyed.
class scoped_conv_path {
 public:
  explicit scoped_conv_path(conv_path path) {
    const char* old = std::getenv("PRSGD_NN_CONV");
    saved_ = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
    if (path == conv_path::fastest) {
      unsetenv("PRSGD_NN_CONV");
    } else {
      setenv("PRSGD_NN_CONV", path == conv_path::gemm ? "gemm" : "direct", 1);
    }
  }
  scoped_conv_path(const scoped_conv_path&) = delete;
  scoped_conv_path& operator=(const scoped_conv_path&) = delete;
  ~scoped_conv_path() {
    if (saved_) {
      setenv("PRSGD_NN_CONV", saved_->c_str(), 1);
    } else {
      unsetenv("PRSGD_NN_CONV");
    }
  }

 private:
  std::optional<std::string> saved_;
};

// Builds a "same" conv2d (with bias) on `path`.
std::unique_ptr<layer> make_conv_on_path(shape3 in, int out, int k, conv_path path) {
  const scoped_conv_path on(path);
  return make_conv2d(in, out, k, 1, (k - 1) / 2, true);
}

float max_abs_diff(const float* a, const float* b, std::size_t n) {
  float m = 0.0F;
  for (std::size_t i = 0; i < n; ++i) {
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

// Parameters shared by a reference layer and one under test, each with its own gradients (0.5 to start,
// so that an accumulating backward shows), initialised through the reference.
struct shared_params {
  shared_params(layer& ref, layer& test, std::uint64_t seed)
      : rng(seed), values(ref.num_params()), g_ref(values.size(), 0.5F), g_test(values.size(), 0.5F) {
    ref.bind(values.data(), nullptr, nullptr);
    ref.reset_parameters(rng);
    ref.bind(values.data(), g_ref.data(), nullptr);
    test.bind(values.data(), g_test.data(), nullptr);
  }
  [[nodiscard]] float grad_diff() const { return max_abs_diff(g_ref.data(), g_test.data(), values.size()); }
  tensor random(Eigen::Index rows, Eigen::Index cols) {
    std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
    tensor t(rows, cols);
    for (Eigen::Index i = 0; i < t.size(); ++i) {
      t.data()[i] = dist(rng);
    }
    return t;
  }

  std::mt19937_64 rng;
  std::vector<float> values;
  std::vector<float> g_ref;
  std::vector<float> g_test;
};

struct same_conv_case {
  int cin;
  int cout;
  int k;
  int h;
  int w;
  int batch;
};

class NnDirectConvTest : public ::testing::TestWithParam<same_conv_case> {};

// The direct kernels (and Winograd) against im2col + GEMM: forward y, dx, dw and the bias gradient, in
// both the overwriting and the accumulating backward.
void expect_matches_gemm_path(const same_conv_case& c, conv_path path) {
  const shape3 in{c.cin, c.h, c.w};
  auto gemm = make_conv_on_path(in, c.cout, c.k, conv_path::gemm);
  auto direct = make_conv_on_path(in, c.cout, c.k, path);
  shared_params params(*gemm, *direct, 11);
  const tensor x = params.random(c.cin, c.batch * c.h * c.w);
  tensor y_gemm;
  tensor y_direct;
  gemm->forward(x, y_gemm, true);
  direct->forward(x, y_direct, true);
  ASSERT_EQ(y_gemm.rows(), y_direct.rows());
  ASSERT_EQ(y_gemm.cols(), y_direct.cols());
  EXPECT_LT((y_gemm - y_direct).cwiseAbs().maxCoeff(), 1e-4F);

  const tensor dy = params.random(y_gemm.rows(), y_gemm.cols());
  const float tol = 1e-4F * static_cast<float>(c.batch * c.h * c.w);  // dw sums over the batch's positions
  for (const bool overwrite : {true, false}) {
    tensor dx_gemm;
    tensor dx_direct;
    if (overwrite) {
      ASSERT_TRUE(gemm->backward_overwrite(x, y_gemm, dy, &dx_gemm));
      ASSERT_TRUE(direct->backward_overwrite(x, y_direct, dy, &dx_direct));
    } else {
      gemm->backward(x, y_gemm, dy, &dx_gemm);
      direct->backward(x, y_direct, dy, &dx_direct);
    }
    ASSERT_EQ(dx_gemm.rows(), dx_direct.rows());
    ASSERT_EQ(dx_gemm.cols(), dx_direct.cols());
    EXPECT_LT((dx_gemm - dx_direct).cwiseAbs().maxCoeff(), 1e-4F) << "overwrite " << overwrite;
    EXPECT_LT(params.grad_diff(), tol) << "overwrite " << overwrite;
  }
  // Without dx (the first layer) and accumulating once more: twice the batch's gradient plus nothing
  // else, so the two paths still agree.
  gemm->backward(x, y_gemm, dy, nullptr);
  direct->backward(x, y_direct, dy, nullptr);
  EXPECT_LT(params.grad_diff(), 2 * tol);
}

TEST_P(NnDirectConvTest, DirectMatchesGemmPath) { expect_matches_gemm_path(GetParam(), conv_path::direct); }

TEST_P(NnDirectConvTest, FastestMatchesGemmPath) { expect_matches_gemm_path(GetParam(), conv_path::fastest); }

INSTANTIATE_TEST_SUITE_P(Geometries, NnDirectConvTest,
                         ::testing::Values(same_conv_case{16, 32, 5, 14, 14, 3},  // fmnist-cnn's conv2
                                           same_conv_case{1, 16, 5, 28, 28, 3},   // conv1 (dx through GEMM)
                                           same_conv_case{16, 32, 5, 28, 28, 1}, same_conv_case{32, 16, 3, 7, 7, 3},
                                           same_conv_case{16, 16, 5, 9, 5, 3}, same_conv_case{64, 32, 3, 5, 9, 1},
                                           same_conv_case{32, 64, 5, 7, 14, 3}, same_conv_case{64, 64, 3, 14, 14, 1},
                                           same_conv_case{16, 32, 7, 9, 9, 3},
                                           same_conv_case{3, 48, 3, 9, 9, 1},     // V = 1 with 3 groups
                                           same_conv_case{16, 32, 3, 29, 31, 1},  // 3 blocks of 11 per row
                                           same_conv_case{16, 8, 3, 7, 7, 3},     // cout % 16 != 0: GEMM
                                           // Winograd forward and dx (the fastest path) with odd sizes and
                                           // one- and two-row GEMMs; cin or cout outside {16, 32} on the
                                           // direct kernels for that convolution
                                           same_conv_case{32, 16, 5, 7, 7, 3}, same_conv_case{32, 32, 5, 13, 11, 2},
                                           same_conv_case{16, 16, 5, 1, 3, 2}, same_conv_case{48, 16, 5, 6, 6, 2},
                                           same_conv_case{16, 48, 5, 5, 8, 2},
                                           same_conv_case{32, 64, 5, 6, 10, 2}));  // Winograd dw, cin 32

// Finite differences through the direct kernels (forward, dx and dw all direct here) and Winograd
// (16 -> 16, 5x5: forward and dx; 16 -> 32 on even sides: forward, dx and dw).
TEST(NnLayersTest, DirectConvMatchesFiniteDifferences) {
  for (const same_conv_case c : {same_conv_case{16, 16, 3, 5, 9, 2}, same_conv_case{1, 16, 5, 7, 7, 2},
                                 same_conv_case{16, 16, 5, 5, 7, 2}, same_conv_case{16, 32, 5, 4, 6, 1}}) {
    gradient_checker g(make_conv_on_path({c.cin, c.h, c.w}, c.cout, c.k, conv_path::fastest));
    g.check(g.random_input(c.batch), true);
  }
}

// conv2d + relu + max_pool2d(2) as network_builder fuses them (on CPUs with AVX-512F: the pool runs on
// the direct / Winograd kernels' output and routes its gradient into theirs) against the same
// convolution unfused followed by relu+max_pool2d, on the same parameters: forward, dx, dw and bias
// gradients in both backward modes and without dx. The unfused convolution is checked against GEMM above.
class NnConvPoolTest : public ::testing::TestWithParam<same_conv_case> {};

std::vector<std::unique_ptr<layer>> build_conv_relu_pool(const same_conv_case& c, conv_path path) {
  const scoped_conv_path on(path);
  network_builder b({c.cin, c.h, c.w});
  b.conv2d(c.cout, c.k, 1, (c.k - 1) / 2).relu().max_pool(2);
  return b.take();
}

void expect_fused_matches_unfused(const same_conv_case& c, conv_path path) {
  auto built = build_conv_relu_pool(c, path);
  if (!cpu_has_avx512f()) {
    ASSERT_EQ(built.size(), 2U);
    GTEST_SKIP() << "no AVX-512F: conv2d and relu+max_pool2d stay separate";
  }
  ASSERT_EQ(built.size(), 1U);
  layer& fused = *built[0];
  const shape3 in{c.cin, c.h, c.w};
  EXPECT_EQ(fused.output_shape(), (shape3{c.cout, c.h / 2, c.w / 2}));
  auto conv = make_conv_on_path(in, c.cout, c.k, path);
  EXPECT_EQ(fused.describe(), conv->describe() + "+relu+max_pool2d(2)");
  auto pool = make_relu_max_pool2d(conv->output_shape(), 2);
  ASSERT_EQ(fused.num_params(), conv->num_params());
  shared_params params(*conv, fused, 13);
  const tensor x = params.random(c.cin, c.batch * c.h * c.w);
  tensor y_conv;
  tensor y_ref;
  tensor y_fused;
  conv->forward(x, y_conv, true);
  pool->forward(y_conv, y_ref, true);
  fused.forward(x, y_fused, true);
  ASSERT_EQ(y_fused.rows(), y_ref.rows());
  ASSERT_EQ(y_fused.cols(), y_ref.cols());
  EXPECT_EQ(y_fused, y_ref);  // the same convolution, bias addition and pool: bit for bit

  const tensor dy = params.random(y_ref.rows(), y_ref.cols());
  const float tol = 1e-5F * static_cast<float>(c.batch * c.h * c.w);  // bias sums in another order
  for (const bool overwrite : {true, false}) {
    tensor d_conv;
    tensor dx_ref;
    tensor dx_fused;
    pool->backward(y_conv, y_ref, dy, &d_conv);
    if (overwrite) {
      ASSERT_TRUE(conv->backward_overwrite(x, y_conv, d_conv, &dx_ref));
      ASSERT_TRUE(fused.backward_overwrite(x, y_fused, dy, &dx_fused));
    } else {
      conv->backward(x, y_conv, d_conv, &dx_ref);
      fused.backward(x, y_fused, dy, &dx_fused);
    }
    ASSERT_EQ(dx_fused.rows(), dx_ref.rows());
    ASSERT_EQ(dx_fused.cols(), dx_ref.cols());
    EXPECT_LT((dx_fused - dx_ref).cwiseAbs().maxCoeff(), 1e-5F) << "overwrite " << overwrite;
    EXPECT_LT(params.grad_diff(), tol) << "overwrite " << overwrite;
  }
  tensor d_conv;
  pool->backward(y_conv, y_ref, dy, &d_conv);
  conv->backward(x, y_conv, d_conv, nullptr);
  fused.backward(x, y_fused, dy, nullptr);
  EXPECT_LT(params.grad_diff(), 2 * tol);
}

TEST_P(NnConvPoolTest, FusedMatchesUnfusedOnDirectPath) { expect_fused_matches_unfused(GetParam(), conv_path::direct); }

TEST_P(NnConvPoolTest, FusedMatchesUnfusedOnFastestPath) {
  expect_fused_matches_unfused(GetParam(), conv_path::fastest);
}

TEST(NnLayersTest, GemmPathKeepsConvAndPoolSeparate) {
  const auto layers = build_conv_relu_pool({16, 32, 5, 14, 14, 1}, conv_path::gemm);
  ASSERT_EQ(layers.size(), 2U);
  EXPECT_EQ(layers[1]->describe(), "relu+max_pool2d(2)");
}

INSTANTIATE_TEST_SUITE_P(Geometries, NnConvPoolTest,
                         ::testing::Values(same_conv_case{1, 16, 5, 28, 28, 2},   // fmnist-cnn's conv1 (dx: GEMM)
                                           same_conv_case{16, 32, 5, 14, 14, 2},  // conv2 (dx: Winograd)
                                           same_conv_case{32, 16, 5, 6, 6, 2},    // Winograd both ways
                                           same_conv_case{48, 16, 3, 8, 8, 2},    // dx: direct
                                           same_conv_case{16, 32, 3, 4, 10, 3},
                                           same_conv_case{3, 16, 3, 4, 6, 2}));  // dx: GEMM

TEST(NnLayersTest, FusedConvPoolMatchesFiniteDifferences) {
  for (const same_conv_case c : {same_conv_case{16, 16, 5, 4, 6, 2}, same_conv_case{1, 16, 3, 4, 4, 1}}) {
    auto built = build_conv_relu_pool(c, conv_path::fastest);
    gradient_checker g(std::move(built.front()));
    if (built.size() == 1) {
      // A small step: a parameter moves many conv outputs, and a larger one reorders near-tied windows.
      g.check(g.random_input(c.batch), true, 1e-3F);
    }
  }
}

TEST(NnLayersTest, ConvWithOddSidesKeepsItsPoolSeparate) {
  const auto layers = build_conv_relu_pool({16, 16, 3, 7, 6, 1}, conv_path::fastest);
  ASSERT_EQ(layers.size(), 2U);
  EXPECT_EQ(layers[1]->describe(), "relu+max_pool2d(2)");
}

TEST(NnLayersTest, MaxPoolPicksMaximaAndRoutesGradients) {
  for (const shape3 in : {shape3{2, 4, 4}, shape3{1, 5, 5}}) {
    gradient_checker g(make_max_pool2d(in, 2));
    // Distinct values 0.1 apart so that the finite-difference step never changes the arg-max.
    tensor x = g.random_input(2);
    std::vector<int> order(static_cast<std::size_t>(x.size()));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(3));
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      x.data()[i] = 0.1F * static_cast<float>(order[static_cast<std::size_t>(i)]);
    }
    tensor y;
    g.get().forward(x, y, true);
    EXPECT_EQ(y.cols(), 2 * (in.height / 2) * (in.width / 2));
    EXPECT_FLOAT_EQ(y(0, 0), std::max({x(0, 0), x(0, 1), x(0, in.width), x(0, in.width + 1)}));
    g.check(x, true);
  }
}

TEST(NnLayersTest, ReluMaxPoolEqualsReluThenMaxPool) {
  for (const shape3 in : {shape3{2, 4, 4}, shape3{1, 5, 5}, shape3{2, 6, 6}}) {
    for (const int k : {2, 3}) {
      if (in.height < k) {
        continue;
      }
      gradient_checker fused(make_relu_max_pool2d(in, k));
      auto relu = make_relu(in);
      auto pool = make_max_pool2d(in, k);
      // Distinct values 0.1 apart, about half of them negative, so that whole windows are dead.
      tensor x = fused.random_input(2);
      std::vector<int> order(static_cast<std::size_t>(x.size()));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
      for (Eigen::Index i = 0; i < x.size(); ++i) {
        x.data()[i] = 0.1F * static_cast<float>(order[static_cast<std::size_t>(i)] - x.size() / 2) + 0.05F;
      }
      tensor y_fused;
      tensor y_relu;
      tensor y_ref;
      fused.get().forward(x, y_fused, true);
      relu->forward(x, y_relu, true);
      pool->forward(y_relu, y_ref, true);
      ASSERT_EQ(y_fused.rows(), y_ref.rows());
      ASSERT_EQ(y_fused.cols(), y_ref.cols());
      EXPECT_EQ(y_fused, y_ref) << fused.get().describe();
      tensor dy = y_ref;
      std::mt19937_64 rng(9);
      std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
      for (Eigen::Index i = 0; i < dy.size(); ++i) {
        dy.data()[i] = dist(rng);
      }
      tensor dx_fused;
      tensor dx_pool;
      tensor dx_ref;
      fused.get().backward(x, y_fused, dy, &dx_fused);
      pool->backward(y_relu, y_ref, dy, &dx_pool);
      relu->backward(x, y_relu, dx_pool, &dx_ref);
      EXPECT_EQ(dx_fused, dx_ref) << fused.get().describe();
      fused.check(x, true);
    }
  }
}

TEST(NnLayersTest, GlobalAvgPoolBackwardMatchesFiniteDifferences) {
  gradient_checker g(make_global_avg_pool({3, 3, 2}));
  const tensor x = g.random_input(2);
  tensor y;
  g.get().forward(x, y, true);
  EXPECT_NEAR(y(1, 1), x.row(1).segment(6, 6).mean(), 1e-6F);
  g.check(x, true);
}

TEST(NnLayersTest, BatchNormTrainingNormalisesAndMatchesFiniteDifferences) {
  gradient_checker g(make_batch_norm({3, 2, 2}));
  tensor x = g.random_input(4);
  x.array() = x.array() * 3.0F + 2.0F;
  tensor y;
  g.get().forward(x, y, true);
  for (Eigen::Index c = 0; c < 3; ++c) {
    EXPECT_NEAR(y.row(c).mean(), 0.0F, 1e-5F);
    EXPECT_NEAR(y.row(c).squaredNorm() / static_cast<float>(y.cols()), 1.0F, 1e-3F);
  }
  // Running stats moved 10% of the way from (0, 1) towards the batch statistics (unbiased variance).
  const float mean0 = x.row(0).mean();
  const float var0 = (x.row(0).array() - mean0).square().sum() / static_cast<float>(x.cols() - 1);
  EXPECT_NEAR(g.buffers()[0], 0.1F * mean0, 1e-5F);
  EXPECT_NEAR(g.buffers()[3], 0.9F + 0.1F * var0, 1e-4F);
  g.params()[1] = 1.5F;  // a non-trivial gamma and beta
  g.params()[4] = -0.5F;
  g.check(x, true, 1e-2F, 5e-3, 2e-2);
}

TEST(NnLayersTest, BatchNormEvalUsesRunningStatsAndMatchesFiniteDifferences) {
  gradient_checker g(make_batch_norm({2, 1, 3}));
  g.buffers() = {0.5F, -1.0F, 4.0F, 0.25F};  // running mean (2), running var (2)
  g.params() = {2.0F, 1.0F, 0.1F, -0.2F};
  const tensor x = g.random_input(3);
  tensor y;
  g.get().forward(x, y, false);
  EXPECT_NEAR(y(0, 0), 2.0F * (x(0, 0) - 0.5F) / std::sqrt(4.0F + 1e-5F) + 0.1F, 1e-5F);
  g.check(x, false);
  EXPECT_FLOAT_EQ(g.buffers()[0], 0.5F);  // eval mode leaves the running stats alone
}

TEST(NnLayersTest, FlattenUsesPytorchOrderAndInvertsInBackward) {
  gradient_checker g(make_flatten({2, 2, 3}));
  const tensor x = g.random_input(2);
  tensor y;
  g.get().forward(x, y, true);
  ASSERT_EQ(y.rows(), 12);
  ASSERT_EQ(y.cols(), 2);
  EXPECT_FLOAT_EQ(y(6 + 4, 1), x(1, 6 + 4));  // channel 1, position 4 of sample 1
  g.check(x, true);
}

TEST(NnLayersTest, ResidualWithIdentityShortcutMatchesFiniteDifferences) {
  const shape3 in{2, 4, 4};
  std::vector<std::unique_ptr<layer>> main;
  main.push_back(make_conv2d(in, 2, 3, 1, 1, false));
  main.push_back(make_batch_norm(in));
  gradient_checker g(make_residual(std::move(main), {}));
  EXPECT_EQ(g.get().num_params(), 2U * 2 * 9 + 4);
  EXPECT_EQ(g.get().num_buffers(), 4U);
  g.check(g.random_input(2), true, 1e-2F, 5e-3, 2e-2);
}

TEST(NnLayersTest, ResidualWithProjectionShortcutMatchesFiniteDifferences) {
  const shape3 in{2, 4, 4};
  std::vector<std::unique_ptr<layer>> main;
  main.push_back(make_conv2d(in, 3, 3, 2, 1, false));
  main.push_back(make_batch_norm(main.back()->output_shape()));  // smooth, unlike a ReLU kink
  std::vector<std::unique_ptr<layer>> shortcut;
  shortcut.push_back(make_conv2d(in, 3, 1, 2, 0, true));
  gradient_checker g(make_residual(std::move(main), std::move(shortcut)));
  EXPECT_EQ(g.get().output_shape(), (shape3{3, 2, 2}));
  g.check(g.random_input(2), true, 1e-2F, 5e-3, 2e-2);
}

TEST(NnLayersTest, SoftmaxCrossEntropyMatchesFiniteDifferences) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> dist(-2.0F, 2.0F);
  tensor logits(4, 3);
  for (Eigen::Index i = 0; i < logits.size(); ++i) {
    logits.data()[i] = dist(rng);
  }
  const std::vector<std::int32_t> labels{0, 3, 1};
  tensor grad;
  const float loss = softmax_cross_entropy(logits, labels, &grad);
  double manual = 0;
  for (Eigen::Index b = 0; b < 3; ++b) {
    const double z = logits.col(b).array().exp().sum();
    manual -= std::log(std::exp(static_cast<double>(logits(labels[static_cast<std::size_t>(b)], b))) / z);
  }
  EXPECT_NEAR(loss, manual / 3.0, 1e-5);
  const float eps = 1e-2F;
  for (Eigen::Index i = 0; i < logits.size(); ++i) {
    tensor up = logits;
    tensor down = logits;
    up.data()[i] += eps;
    down.data()[i] -= eps;
    const double numeric =
        (softmax_cross_entropy(up, labels, nullptr) - softmax_cross_entropy(down, labels, nullptr)) / (2.0 * eps);
    EXPECT_NEAR(grad.data()[i], numeric, 1e-3);
  }
  EXPECT_EQ(count_correct(logits, labels), static_cast<std::size_t>((logits.col(0).maxCoeff() == logits(0, 0)) +
                                                                    (logits.col(1).maxCoeff() == logits(3, 1)) +
                                                                    (logits.col(2).maxCoeff() == logits(1, 2))));
}

TEST(NnLayersTest, CloneIsUnboundDeepCopyWithSameGeometry) {
  auto l = make_conv2d({1, 6, 6}, 4, 3, 2, 1, true);
  auto c = l->clone();
  EXPECT_EQ(c->describe(), l->describe());
  EXPECT_EQ(c->num_params(), l->num_params());
  EXPECT_EQ(c->output_shape(), l->output_shape());
}

}  // namespace
}  // namespace prsgd::algorithms
