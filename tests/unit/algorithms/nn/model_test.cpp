// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/model.hpp"

#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/models.hpp"

namespace prsgd::algorithms {
namespace {

// A learnable synthetic set: the class decides which quarter of the image is bright, plus noise.
dataset synthetic(shape3 shape, std::size_t n, int classes, std::uint64_t seed) {
  dataset d;
  d.shape = {shape.channels, shape.height, shape.width};
  d.num_classes = classes;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0F, 0.5F);
  d.features.resize(n * shape.size());
  d.labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int32_t>(i % static_cast<std::size_t>(classes));
    d.labels[i] = label;
    for (std::size_t j = 0; j < shape.size(); ++j) {
      const bool bright = (j * static_cast<std::size_t>(classes)) / shape.size() == static_cast<std::size_t>(label);
      d.features[i * shape.size() + j] = (bright ? 1.0F : -0.3F) + noise(rng);
    }
  }
  return d;
}

std::vector<std::size_t> first(std::size_t n, std::size_t offset = 0) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), offset);
  return v;
}

TEST(NnModelTest, BuilderFusesReluIntoTheFollowingMaxPool) {
  network_builder b({1, 8, 8});
  b.conv2d(2, 3, 1, 1).relu().max_pool(2).relu().flatten().linear(3);
  const auto layers = b.take();
  ASSERT_EQ(layers.size(), 5U);
  EXPECT_EQ(layers[1]->describe(), "relu+max_pool2d(2)");
  EXPECT_EQ(layers[2]->describe(), "relu");
  network_builder plain({1, 8, 8});
  plain.max_pool(2);
  EXPECT_EQ(plain.take()[0]->describe(), "max_pool2d(2)");
}

TEST(NnModelTest, BuiltinModelsHaveThePytorchParameterCounts) {
  const model_config cfg{{1, 28, 28}, 10, 1};
  auto mlp = make_fmnist_mlp(cfg);
  ASSERT_TRUE(mlp);
  EXPECT_EQ((*mlp)->num_params(), 784U * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ((*mlp)->grads().size(), (*mlp)->num_params());
  auto cnn = make_fmnist_cnn(cfg);
  ASSERT_TRUE(cnn);
  EXPECT_EQ((*cnn)->num_params(), 16U * 25 + 16 + 32 * 400 + 32 + 1568 * 10 + 10);
  auto resnet = make_fmnist_resnet(cfg);
  ASSERT_TRUE(resnet);
  // ResNet-20 (option B shortcuts, bias-free convs): 0.27M weights; BN running stats are averaged buffers.
  EXPECT_GT((*resnet)->num_trainable(), 270000U);
  EXPECT_LT((*resnet)->num_trainable(), 280000U);
  EXPECT_EQ((*resnet)->num_params() - (*resnet)->num_trainable(), 2U * (16 * 7 + 32 * 7 + 64 * 7));
}

TEST(NnModelTest, InitialisationFollowsPytorchBounds) {
  auto m = make_fmnist_mlp({{1, 28, 28}, 10, 3});
  ASSERT_TRUE(m);
  const auto p = (*m)->params();
  const float bound = 1.0F / std::sqrt(784.0F);
  float max_abs = 0.0F;
  double sum_sq = 0.0;
  for (std::size_t i = 0; i < 784U * 512; ++i) {
    max_abs = std::max(max_abs, std::abs(p[i]));
    sum_sq += static_cast<double>(p[i]) * p[i];
  }
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.99F * bound);
  // Uniform(-b, b) has variance b^2 / 3.
  EXPECT_NEAR(sum_sq / (784.0 * 512.0), bound * bound / 3.0, 0.02 * bound * bound);
}

TEST(NnModelTest, SameSeedGivesBitIdenticalTrainingRuns) {
  const dataset d = synthetic({1, 12, 12}, 64, 4, 9);
  auto run = [&](std::uint64_t seed) {
    auto m = make_fmnist_cnn({{1, 12, 12}, 4, seed});
    auto opt = sgd::make({.learning_rate = 0.05F, .momentum = 0.9F});
    for (int step = 0; step < 4; ++step) {
      (void)(*m)->train_step(d, first(16, static_cast<std::size_t>(step) * 16), *opt);
    }
    const auto p = (*m)->params();
    return std::vector<float>(p.begin(), p.end());
  };
  const auto a = run(11);
  const auto b = run(11);
  const auto c = run(12);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
}

// The same images as bytes (a shared cache) and as the floats their table gives: training and evaluation
// must not tell them apart, to the bit.
TEST(NnModelTest, ByteSamplesTrainBitIdenticallyToTheirFloats) {
  constexpr std::size_t n = 48;
  constexpr std::size_t size = 2 * 8 * 8;  // two channels: each plane is laid out on its own
  std::mt19937_64 rng(5);
  auto raw = std::make_shared<std::vector<std::uint8_t>>(n * size);
  for (auto& b : *raw) {
    b = static_cast<std::uint8_t>(rng() % 256U);
  }
  auto bytes = std::make_shared<byte_samples>();
  bytes->data = raw->data();
  bytes->owner = raw;
  for (int b = 0; b < 256; ++b) {
    bytes->values[static_cast<std::size_t>(b)] = (static_cast<float>(b) / 255.0F - 0.3F) / 0.4F;
  }
  dataset as_bytes;
  as_bytes.shape = {2, 8, 8};
  as_bytes.num_classes = 4;
  for (std::size_t i = 0; i < n; ++i) {
    as_bytes.labels.push_back(static_cast<std::int32_t>(rng() % 4U));
  }
  dataset as_floats = as_bytes;
  as_bytes.bytes = bytes;
  for (const std::uint8_t b : *raw) {
    as_floats.features.push_back(bytes->values[b]);
  }
  auto run = [&](const dataset& d) {
    auto m = make_fmnist_cnn({{2, 8, 8}, 4, 3});
    auto opt = sgd::make({.learning_rate = 0.05F, .momentum = 0.9F});
    const std::vector<std::size_t> order = {5, 17, 2, 40, 33, 8, 11, 47, 0, 21, 29, 14};
    for (int step = 0; step < 3; ++step) {
      (void)(*m)->train_step(d, std::span<const std::size_t>(order).subspan(static_cast<std::size_t>(step) * 4, 4),
                             *opt);
    }
    const auto eval = (*m)->evaluate(d, 16);
    const auto p = (*m)->params();
    return std::pair{std::vector<float>(p.begin(), p.end()), eval.loss};
  };
  const auto [from_bytes, loss_bytes] = run(as_bytes);
  const auto [from_floats, loss_floats] = run(as_floats);
  ASSERT_EQ(from_bytes.size(), from_floats.size());
  EXPECT_EQ(std::memcmp(from_bytes.data(), from_floats.data(), from_bytes.size() * sizeof(float)), 0);
  EXPECT_EQ(loss_bytes, loss_floats);
  std::vector<float> sample(size);
  as_bytes.copy_sample(7, sample.data());
  EXPECT_EQ(std::memcmp(sample.data(), as_floats.sample(7), size * sizeof(float)), 0);
}

TEST(NnModelTest, TrainingReducesLossAndLearnsSyntheticClasses) {
  const dataset d = synthetic({1, 8, 8}, 128, 4, 1);
  auto m = make_fmnist_mlp({{1, 8, 8}, 4, 5});
  ASSERT_TRUE(m);
  auto opt = sgd::make({.learning_rate = 0.05F, .momentum = 0.9F});
  const evaluation before = (*m)->evaluate(d, 50);
  for (int epoch = 0; epoch < 5; ++epoch) {
    for (std::size_t s = 0; s < 128; s += 16) {
      (void)(*m)->train_step(d, first(16, s), *opt);
    }
  }
  const evaluation after = (*m)->evaluate(d, 50);
  EXPECT_EQ(after.samples, 128U);
  EXPECT_LT(after.loss, 0.5 * before.loss);
  EXPECT_GT(after.accuracy, 0.95);
}

// Returns (analytic, numeric) gradients of the batch loss for `count` random parameters.
std::pair<std::vector<double>, std::vector<double>> gradient_pairs(model& m, const dataset& d, float eps, int count) {
  const auto batch = first(d.size());
  (void)m.forward_backward(d, batch);
  const std::vector<float> analytic(m.grads().begin(), m.grads().end());
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<std::size_t> pick(0, m.num_trainable() - 1);
  std::vector<double> a;
  std::vector<double> n;
  for (int k = 0; k < count; ++k) {
    const std::size_t i = pick(rng);
    const float saved = m.params()[i];
    m.params()[i] = saved + eps;
    const double up = m.forward_backward(d, batch);
    m.params()[i] = saved - eps;
    const double down = m.forward_backward(d, batch);
    m.params()[i] = saved;
    a.push_back(analytic[i]);
    n.push_back((up - down) / (2.0 * eps));
  }
  return {a, n};
}

TEST(NnModelTest, SmoothResidualNetworkGradientMatchesFiniteDifferences) {
  // Every layer kind except the kinked ones (ReLU, max-pool), composed: conv, batch norm, a projected
  // residual block, global average pool, linear, softmax cross-entropy.
  const shape3 in{1, 6, 6};
  network_builder b(in);
  b.conv2d(3, 3, 1, 1).batch_norm();
  b.residual([](network_builder& m) { m.conv2d(4, 3, 2, 1, false).batch_norm(); },
             [](network_builder& s) { s.conv2d(4, 1, 2, 0, false).batch_norm(); });
  b.global_avg_pool().linear(3);
  auto made = model::make("smooth", in, 3, b.take(), 3);
  ASSERT_TRUE(made);
  const auto [a, n] = gradient_pairs(**made, synthetic(in, 4, 3, 2), 1e-2F, 60);
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_NEAR(a[k], n[k], 2e-3 + 2e-2 * std::abs(n[k])) << "sample " << k;
  }
}

TEST(NnModelTest, ResnetGradientAgreesWithFiniteDifferences) {
  // ReLUs make single finite differences unreliable where a unit sits near its kink, so this
  // compares the whole sampled gradient vector: relative error and cosine similarity.
  auto made = make_fmnist_resnet({{1, 8, 8}, 3, 4}, 1);
  ASSERT_TRUE(made);
  const auto [a, n] = gradient_pairs(**made, synthetic({1, 8, 8}, 4, 3, 2), 2e-3F, 40);
  double dot = 0;
  double na = 0;
  double nn = 0;
  double diff = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    dot += a[k] * n[k];
    na += a[k] * a[k];
    nn += n[k] * n[k];
    diff += (a[k] - n[k]) * (a[k] - n[k]);
  }
  EXPECT_GT(dot / std::sqrt(na * nn), 0.995);
  EXPECT_LT(std::sqrt(diff / nn), 0.1);
}

TEST(NnModelTest, CloneCopiesParametersAndIsIndependent) {
  auto m = make_fmnist_resnet({{1, 8, 8}, 3, 4}, 1);
  ASSERT_TRUE(m);
  auto c = (*m)->clone();
  ASSERT_EQ(c->num_params(), (*m)->num_params());
  EXPECT_TRUE(std::equal((*m)->params().begin(), (*m)->params().end(), c->params().begin()));
  const dataset d = synthetic({1, 8, 8}, 8, 3, 2);
  auto opt = sgd::make({});
  (void)c->train_step(d, first(8), *opt);
  EXPECT_FALSE(std::equal((*m)->params().begin(), (*m)->params().end(), c->params().begin()));
  // The clone computes the same function as the original after copying parameters back.
  ASSERT_TRUE((*m)->set_params(c->params()));
  EXPECT_DOUBLE_EQ((*m)->evaluate(d).loss, c->evaluate(d).loss);
}

TEST(NnModelTest, SetParamsRejectsWrongSize) {
  auto m = make_fmnist_cnn({{1, 8, 8}, 3, 4});
  ASSERT_TRUE(m);
  std::vector<float> wrong((*m)->num_params() + 1, 0.0F);
  EXPECT_EQ((*m)->set_params(wrong).error().code, errc::invalid_argument);
}

TEST(NnModelTest, BatchNormRunningStatsLiveInTheParamBuffer) {
  auto made = make_fmnist_resnet({{1, 8, 8}, 3, 4}, 1);
  ASSERT_TRUE(made);
  model& m = **made;
  const dataset d = synthetic({1, 8, 8}, 8, 3, 2);
  const evaluation e1 = m.evaluate(d);
  // Changing only the running statistics (the tail after the trainable part) changes eval outputs.
  for (std::size_t i = m.num_trainable(); i < m.num_params(); ++i) {
    m.params()[i] += 0.5F;
  }
  const evaluation e2 = m.evaluate(d);
  EXPECT_NE(e1.loss, e2.loss);
  // A training step in train mode moves them.
  const std::vector<float> before(m.params().begin() + static_cast<std::ptrdiff_t>(m.num_trainable()),
                                  m.params().end());
  auto opt = sgd::make({});
  (void)m.train_step(d, first(8), *opt);
  EXPECT_FALSE(
      std::equal(before.begin(), before.end(), m.params().begin() + static_cast<std::ptrdiff_t>(m.num_trainable())));
}

TEST(NnModelTest, MakeRejectsLayersThatDoNotChain) {
  std::vector<std::unique_ptr<layer>> layers;
  layers.push_back(make_linear({4, 1, 1}, 3));
  EXPECT_EQ(model::make("bad", {5, 1, 1}, 3, std::move(layers), 1).error().code, errc::invalid_argument);
  std::vector<std::unique_ptr<layer>> wrong_classes;
  wrong_classes.push_back(make_linear({4, 1, 1}, 3));
  EXPECT_EQ(model::make("bad", {4, 1, 1}, 2, std::move(wrong_classes), 1).error().code, errc::invalid_argument);
}

TEST(NnModelTest, PredictReturnsLogitsPerSample) {
  auto m = make_fmnist_mlp({{1, 4, 4}, 3, 4});
  ASSERT_TRUE(m);
  const std::vector<float> inputs(2 * 16, 0.25F);
  const tensor& logits = (*m)->predict(inputs, 2);
  EXPECT_EQ(logits.rows(), 3);
  EXPECT_EQ(logits.cols(), 2);
  EXPECT_EQ(logits.col(0), logits.col(1));
}

TEST(NnModelRegistryTest, InstanceHasBuiltinsAndBuildsThemBySeed) {
  auto& r = model_registry::instance();
  for (const char* name : {"fmnist-mlp", "fmnist-cnn", "fmnist-resnet", "fmnist-resnet8"}) {
    EXPECT_TRUE(r.contains(name)) << name;
  }
  auto a = r.make("fmnist-cnn", {{1, 28, 28}, 10, 42});
  auto b = r.make("fmnist-cnn", {{1, 28, 28}, 10, 42});
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ((*a)->name(), "fmnist-cnn");
  EXPECT_TRUE(std::equal((*a)->params().begin(), (*a)->params().end(), (*b)->params().begin()));
  EXPECT_EQ(r.make("no-such-model", {}).error().code, errc::not_found);
}

TEST(NnModelRegistryTest, UsersAddAndRemoveModels) {
  model_registry r;
  EXPECT_TRUE(r.names().empty());
  auto tiny = [](const model_config& c) {
    network_builder b(c.input);
    b.linear(c.num_classes);
    return model::make("tiny", c.input, c.num_classes, b.take(), c.seed);
  };
  ASSERT_TRUE(r.add("tiny", "one linear layer", tiny));
  EXPECT_EQ(r.add("tiny", "again", tiny).error().code, errc::already_exists);
  EXPECT_EQ(r.add("", "no name", tiny).error().code, errc::invalid_argument);
  auto m = r.make("tiny", {{2, 3, 3}, 4, 1});
  ASSERT_TRUE(m);
  EXPECT_EQ((*m)->num_params(), 18U * 4 + 4);
  EXPECT_EQ(*r.description("tiny"), "one linear layer");
  EXPECT_EQ(r.names(), std::vector<std::string>{"tiny"});
  ASSERT_TRUE(r.remove("tiny"));
  EXPECT_EQ(r.remove("tiny").error().code, errc::not_found);
  register_builtin_models(r);
  EXPECT_EQ(r.names().size(), 4U);
  EXPECT_EQ(r.make("fmnist-cnn", {{1, 6, 6}, 10, 1}).error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace prsgd::algorithms
