// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/sharding.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <set>
#include <vector>

namespace {

using prsgd::errc;
using namespace prsgd::algorithms;

// 10 classes, 100 samples each, labels interleaved like a real data set.
std::vector<std::int32_t> balanced_labels(std::size_t per_class = 100, int classes = 10) {
  std::vector<std::int32_t> labels;
  for (std::size_t i = 0; i < per_class * static_cast<std::size_t>(classes); ++i) {
    labels.push_back(static_cast<std::int32_t>(i % static_cast<std::size_t>(classes)));
  }
  return labels;
}

std::set<int> classes_of(const std::vector<std::size_t>& idx, const std::vector<std::int32_t>& labels) {
  std::set<int> out;
  for (auto i : idx) {
    out.insert(labels[i]);
  }
  return out;
}

// Checks that parts are pairwise disjoint and together cover [0, n) exactly once.
void expect_exact_cover(const std::vector<std::vector<std::size_t>>& parts, std::size_t n) {
  std::vector<int> hits(n, 0);
  for (const auto& p : parts) {
    for (auto i : p) {
      ASSERT_LT(i, n);
      ++hits[i];
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[i], 1) << "sample " << i;
  }
}

// Returns the samples of the next full epoch (the first batch may roll the sampler into it).
std::vector<std::size_t> epoch_samples(shard_sampler& s) {
  std::vector<std::size_t> out;
  std::uint64_t epoch = 0;
  for (std::size_t b = 0; b < s.batches_per_epoch(); ++b) {
    auto batch = s.next_batch();
    if (b == 0) {
      epoch = s.state().epoch;
    }
    EXPECT_EQ(s.state().epoch, epoch);
    out.insert(out.end(), batch.begin(), batch.end());
  }
  return out;
}

TEST(ShardingTest, IidIsDisjointAndCoversEveryEpoch) {
  const auto labels = balanced_labels(101);  // 1010 samples: slices of unequal size
  for (std::uint64_t epoch : {0U, 1U, 7U}) {
    auto parts = partition(labels, 4, {.scheme = shard_scheme::iid, .seed = 5}, epoch);
    ASSERT_TRUE(parts.has_value());
    expect_exact_cover(*parts, labels.size());
    for (const auto& p : *parts) {
      EXPECT_GE(p.size(), 252U);
      EXPECT_LE(p.size(), 253U);
    }
  }
}

TEST(ShardingTest, IidSamplersOfAllWorkersCoverTheEpoch) {
  const auto labels = balanced_labels();
  std::vector<std::vector<std::size_t>> seen;
  for (int w = 0; w < 3; ++w) {
    auto s = shard_sampler::make(labels, w, 3, {.scheme = shard_scheme::iid, .seed = 9}, 32);
    ASSERT_TRUE(s.has_value()) << s.error().message();
    seen.push_back(epoch_samples(*s));
  }
  expect_exact_cover(seen, labels.size());
}

TEST(ShardingTest, SamplerIsDeterministicAndSeedSensitive) {
  const auto labels = balanced_labels();
  for (auto scheme : {shard_scheme::iid, shard_scheme::by_label, shard_scheme::dirichlet}) {
    const shard_config cfg{.scheme = scheme, .classes_per_worker = 3, .alpha = 0.3, .seed = 42};
    auto a = shard_sampler::make(labels, 1, 4, cfg, 16);
    auto b = shard_sampler::make(labels, 1, 4, cfg, 16);
    auto other_cfg = cfg;
    other_cfg.seed = 43;
    auto c = shard_sampler::make(labels, 1, 4, other_cfg, 16);
    ASSERT_TRUE(a.has_value() && b.has_value() && c.has_value()) << to_string(scheme);
    bool differs = false;
    for (int i = 0; i < 50; ++i) {
      auto x = a->next_batch();
      auto y = b->next_batch();
      auto z = c->next_batch();
      ASSERT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << to_string(scheme) << " batch " << i;
      differs = differs || !std::equal(x.begin(), x.end(), z.begin(), z.end());
    }
    EXPECT_TRUE(differs) << to_string(scheme);
  }
}

TEST(ShardingTest, EpochsReshuffleTheShard) {
  const auto labels = balanced_labels();
  auto s =
      shard_sampler::make(labels, 0, 2, {.scheme = shard_scheme::by_label, .classes_per_worker = 5, .seed = 1}, 50);
  ASSERT_TRUE(s.has_value()) << s.error().message();
  auto e0 = epoch_samples(*s);
  auto e1 = epoch_samples(*s);
  EXPECT_EQ(s->state().epoch, 1U);
  EXPECT_NE(e0, e1);  // different order...
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_EQ(e0, e1);                                              // ...same non-IID shard
  EXPECT_EQ(std::adjacent_find(e0.begin(), e0.end()), e0.end());  // each sample once per epoch
}

TEST(ShardingTest, ByLabelGivesEachWorkerExactlyKClasses) {
  const auto labels = balanced_labels();
  auto parts = partition(labels, 5, {.scheme = shard_scheme::by_label, .classes_per_worker = 2, .seed = 3});
  ASSERT_TRUE(parts.has_value()) << parts.error().message();
  expect_exact_cover(*parts, labels.size());
  for (const auto& p : *parts) {
    EXPECT_EQ(classes_of(p, labels).size(), 2U);
    EXPECT_EQ(p.size(), 200U);
  }
  // Overlapping owners: 4 workers x 3 classes = 12 > 10, two classes are split between two workers.
  auto overlap = partition(labels, 4, {.scheme = shard_scheme::by_label, .classes_per_worker = 3, .seed = 3});
  ASSERT_TRUE(overlap.has_value());
  expect_exact_cover(*overlap, labels.size());
  for (const auto& p : *overlap) {
    EXPECT_EQ(classes_of(p, labels).size(), 3U);
  }
}

TEST(ShardingTest, ByLabelRejectsBadClassCounts) {
  const auto labels = balanced_labels();
  EXPECT_EQ(partition(labels, 2, {.scheme = shard_scheme::by_label, .classes_per_worker = 2}).error().code,
            errc::invalid_argument);  // 2 x 2 < 10 classes
  EXPECT_EQ(partition(labels, 20, {.scheme = shard_scheme::by_label, .classes_per_worker = 0}).error().code,
            errc::invalid_argument);
  EXPECT_EQ(partition(labels, 2, {.scheme = shard_scheme::by_label, .classes_per_worker = 11}).error().code,
            errc::invalid_argument);
}

// Fraction of a worker's samples in its most frequent class, averaged over workers.
double mean_top_class_share(const std::vector<std::vector<std::size_t>>& parts,
                            const std::vector<std::int32_t>& labels) {
  double total = 0;
  for (const auto& p : parts) {
    std::vector<int> counts(10, 0);
    for (auto i : p) {
      ++counts[static_cast<std::size_t>(labels[i])];
    }
    total += static_cast<double>(*std::max_element(counts.begin(), counts.end())) / static_cast<double>(p.size());
  }
  return total / static_cast<double>(parts.size());
}

TEST(ShardingTest, DirichletSkewFollowsAlpha) {
  const auto labels = balanced_labels(200);
  auto skewed = partition(labels, 8, {.scheme = shard_scheme::dirichlet, .alpha = 0.1, .seed = 11});
  auto mild = partition(labels, 8, {.scheme = shard_scheme::dirichlet, .alpha = 1000.0, .seed = 11});
  auto iid = partition(labels, 8, {.scheme = shard_scheme::iid, .seed = 11});
  ASSERT_TRUE(skewed.has_value() && mild.has_value() && iid.has_value());
  expect_exact_cover(*skewed, labels.size());
  expect_exact_cover(*mild, labels.size());
  const double s = mean_top_class_share(*skewed, labels);
  const double m = mean_top_class_share(*mild, labels);
  const double i = mean_top_class_share(*iid, labels);
  EXPECT_GT(s, 0.5) << "alpha=0.1 should concentrate workers on few classes";
  EXPECT_LT(m, 0.16) << "alpha=1000 should be close to uniform (0.1)";
  EXPECT_LT(i, 0.2);
}

TEST(ShardingTest, DirichletRespectsMinimumOrFails) {
  const auto labels = balanced_labels(10);
  auto ok =
      partition(labels, 4, {.scheme = shard_scheme::dirichlet, .alpha = 0.5, .min_samples_per_worker = 5, .seed = 2});
  ASSERT_TRUE(ok.has_value()) << ok.error().message();
  for (const auto& p : *ok) {
    EXPECT_GE(p.size(), 5U);
  }
  auto impossible =
      partition(labels, 4, {.scheme = shard_scheme::dirichlet, .alpha = 0.5, .min_samples_per_worker = 30, .seed = 2});
  ASSERT_FALSE(impossible.has_value());
  EXPECT_EQ(impossible.error().code, errc::invalid_argument);
  EXPECT_EQ(partition(labels, 4, {.scheme = shard_scheme::dirichlet, .alpha = 0}).error().code, errc::invalid_argument);
}

TEST(ShardingTest, BatchesHaveSizeBAndShortLastBatch) {
  const auto labels = balanced_labels(10);  // 100 samples, 1 worker
  auto s = shard_sampler::make(labels, 0, 1, {}, 30);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->batches_per_epoch(), 4U);
  EXPECT_EQ(s->next_batch().size(), 30U);
  EXPECT_EQ(s->next_batch().size(), 30U);
  EXPECT_EQ(s->next_batch().size(), 30U);
  EXPECT_EQ(s->next_batch().size(), 10U);
  EXPECT_EQ(s->state(), (sampler_state{0, 100}));
  EXPECT_EQ(s->next_batch().size(), 30U);
  EXPECT_EQ(s->state(), (sampler_state{1, 30}));

  auto d = shard_sampler::make(labels, 0, 1, {}, 30, /*drop_last=*/true);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->batches_per_epoch(), 3U);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(d->next_batch().size(), 30U);
  }
  EXPECT_EQ(d->next_batch().size(), 30U);
  EXPECT_EQ(d->state(), (sampler_state{1, 30}));
}

// The IID visiting order is a published contract: bench/vs_pytorch/prsgd_sampler.py reproduces it bit for bit
// so that the PyTorch twin trains on exactly prsgd's batches, and its --self-test pins the same values.
// Change both together.
TEST(ShardingTest, IidOrderIsPinnedForThePyTorchTwin) {
  const std::vector<std::int32_t> labels(60000, 0);
  struct expected_batch {
    int worker;
    int batch;
    std::size_t size;
    std::array<std::size_t, 3> first;
  };
  const std::array<expected_batch, 6> golden{{{0, 0, 64, {45771, 23216, 28940}},
                                              {0, 234, 24, {38912, 36982, 52673}},
                                              {0, 235, 64, {36556, 2700, 42400}},
                                              {1, 0, 64, {43336, 12669, 24598}},
                                              {1, 234, 24, {2684, 40824, 12929}},
                                              {3, 235, 64, {19616, 32028, 21218}}}};
  for (int w : {0, 1, 3}) {
    auto s = shard_sampler::make(labels, w, 4, {.seed = 1}, 64);
    ASSERT_TRUE(s.has_value());
    for (int b = 0; b <= 235; ++b) {
      const auto batch = s->next_batch();
      for (const auto& g : golden) {
        if (g.worker == w && g.batch == b) {
          ASSERT_EQ(batch.size(), g.size) << "worker " << w << " batch " << b;
          EXPECT_EQ((std::array<std::size_t, 3>{batch[0], batch[1], batch[2]}), g.first)
              << "worker " << w << " batch " << b;
        }
      }
    }
  }
}

TEST(ShardingTest, RestoredSamplerContinuesIdentically) {
  const auto labels = balanced_labels();
  const shard_config cfg{.scheme = shard_scheme::dirichlet, .alpha = 0.5, .seed = 77};
  auto a = shard_sampler::make(labels, 2, 3, cfg, 24);
  ASSERT_TRUE(a.has_value());
  for (int i = 0; i < 23; ++i) {
    (void)a->next_batch();
  }
  const sampler_state saved = a->state();
  EXPECT_GT(saved.epoch, 0U);  // crossed at least one epoch boundary
  auto b = shard_sampler::make(labels, 2, 3, cfg, 24);
  ASSERT_TRUE(b.has_value());
  ASSERT_TRUE(b->restore(saved).has_value());
  for (int i = 0; i < 30; ++i) {
    auto x = a->next_batch();
    auto y = b->next_batch();
    ASSERT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << i;
  }
  auto bad = b->restore({0, b->shard_size() + 1});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
}

TEST(ShardingTest, MakeRejectsBadArguments) {
  const auto labels = balanced_labels(1);  // 10 samples
  EXPECT_EQ(shard_sampler::make(labels, 0, 0, {}, 4).error().code, errc::invalid_argument);
  EXPECT_EQ(shard_sampler::make(labels, 3, 3, {}, 4).error().code, errc::invalid_argument);
  EXPECT_EQ(shard_sampler::make(labels, -1, 3, {}, 4).error().code, errc::invalid_argument);
  EXPECT_EQ(shard_sampler::make(labels, 0, 3, {}, 0).error().code, errc::invalid_argument);
  EXPECT_EQ(shard_sampler::make(labels, 0, 11, {}, 1).error().code, errc::invalid_argument);
  EXPECT_EQ(shard_sampler::make(labels, 0, 2, {}, 6, true).error().code, errc::invalid_argument);
  std::vector<std::int32_t> negative{0, 1, -1, 2};
  EXPECT_EQ(partition(negative, 2, {.scheme = shard_scheme::by_label, .classes_per_worker = 2}).error().code,
            errc::invalid_argument);
}

TEST(ShardingTest, ParsesSchemeNames) {
  for (auto s : {shard_scheme::iid, shard_scheme::by_label, shard_scheme::dirichlet}) {
    auto p = parse_shard_scheme(to_string(s));
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(*p, s);
  }
  EXPECT_EQ(parse_shard_scheme("noniid").error().code, errc::invalid_argument);
}

}  // namespace
