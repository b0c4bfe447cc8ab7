// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/sample_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

namespace {

using namespace prsgd::algorithms;

pool_config config_of(std::uint64_t samples, std::uint64_t block, std::uint64_t max_epochs = 0) {
  pool_config c;
  c.samples = samples;
  c.block = block;
  c.seed = 7;
  c.max_epochs = max_epochs;
  return c;
}

std::uint64_t total(const std::vector<sample_range>& rs) {
  std::uint64_t n = 0;
  for (const auto& r : rs) {
    n += r.size();
  }
  return n;
}

// Counts, per epoch, how often each sample was consumed.
struct coverage {
  std::map<std::uint64_t, std::vector<int>> hits;
  std::uint64_t samples;
  explicit coverage(std::uint64_t n) : samples(n) {}
  void add(const std::vector<sample_range>& rs) {
    for (const auto& r : rs) {
      auto& h = hits[r.epoch];
      h.resize(samples, 0);
      for (auto i = r.begin; i < r.end; ++i) {
        ++h[i];
      }
    }
  }
  // Every sample of `epoch` exactly once.
  [[nodiscard]] bool exact(std::uint64_t epoch) const {
    auto it = hits.find(epoch);
    if (it == hits.end()) {
      return false;
    }
    for (int h : it->second) {
      if (h != 1) {
        return false;
      }
    }
    return true;
  }
};

TEST(SamplePool, RefusesAnEmptyDataSetOrBlock) {
  EXPECT_FALSE(sample_pool::make(config_of(0, 10)));
  EXPECT_FALSE(sample_pool::make(config_of(10, 0)));
}

TEST(SamplePool, OneMemberCoversEveryEpochExactlyOnceInBlocks) {
  auto pool = sample_pool::make(config_of(1000, 64, 2));
  ASSERT_TRUE(pool);
  coverage cov(1000);
  std::uint64_t taken = 0;
  for (int round = 0; round < 100 && !pool->finished(); ++round) {
    auto g = pool->take(96, 64);
    for (const auto& r : g) {
      EXPECT_LT(r.begin, r.end);
      EXPECT_LE(r.end, 1000U);
    }
    taken += total(g);
    pool->consume(g);
    cov.add(g);
  }
  EXPECT_TRUE(pool->finished());
  EXPECT_EQ(pool->epochs_done(), 2U);
  EXPECT_EQ(taken, 2000U);
  EXPECT_TRUE(cov.exact(0));
  EXPECT_TRUE(cov.exact(1));
  EXPECT_DOUBLE_EQ(pool->passes(), 2.0);
  EXPECT_TRUE(pool->take(10, 8).empty()) << "nothing beyond max_epochs";
}

TEST(SamplePool, ARoundSpanningTheEpochEndTakesTheRestThenTheNextEpoch) {
  auto pool = sample_pool::make(config_of(100, 10));
  ASSERT_TRUE(pool);
  auto first = pool->take(95, 100);
  pool->consume(first);
  auto span = pool->take(20, 100);
  ASSERT_EQ(total(span), 20U);
  std::uint64_t in0 = 0;
  std::uint64_t in1 = 0;
  for (const auto& r : span) {
    (r.epoch == 0 ? in0 : in1) += r.size();
  }
  EXPECT_EQ(in0, 5U) << "the rest of epoch 0 first";
  EXPECT_EQ(in1, 15U) << "then the start of epoch 1";
  EXPECT_EQ(span.front().epoch, 0U);
  pool->consume(span);
  EXPECT_EQ(pool->epochs_done(), 1U);
  EXPECT_DOUBLE_EQ(pool->passes(), 1.15);
}

TEST(SamplePool, EpochsUseDifferentBlockOrders) {
  auto pool = sample_pool::make(config_of(1000, 10));
  ASSERT_TRUE(pool);
  auto a = pool->take(1000, 1000);
  auto b = pool->take(1000, 1000);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(a.front().epoch, 0U);
  EXPECT_EQ(b.front().epoch, 1U);
  std::vector<std::uint64_t> ba;
  std::vector<std::uint64_t> bb;
  for (const auto& r : a) {
    ba.push_back(r.begin);
  }
  for (const auto& r : b) {
    bb.push_back(r.begin);
  }
  EXPECT_NE(ba, bb);
}

TEST(SamplePool, ChurnLossAndReturnStillCoverEveryEpochExactlyOnce) {
  // Members come and go; a member's grant is consumed only when its "submission" is accepted, and goes
  // back to the pool when it is lost, rejected or the member leaves.
  const std::uint64_t n = 777;
  auto pool = sample_pool::make(config_of(n, 50, 3));
  ASSERT_TRUE(pool);
  coverage cov(n);
  std::uint64_t step = 0;
  int members = 2;
  while (!pool->finished()) {
    ASSERT_LT(step, 10000U);
    std::vector<std::vector<sample_range>> grants;
    for (int m = 0; m < members; ++m) {
      grants.push_back(pool->take(40 + 13 * static_cast<std::uint64_t>(m), 8));
      EXPECT_LE(grants.back().size(), 8U);
    }
    for (std::size_t m = 0; m < grants.size(); ++m) {
      const bool lost = (step + m) % 5 == 3;  // dead, rejected, or left before submitting
      if (lost) {
        pool->give_back(grants[m]);
      } else {
        pool->consume(grants[m]);
        cov.add(grants[m]);
      }
    }
    members = 1 + static_cast<int>((step * 7) % 4);  // joins and leaves between rounds
    ++step;
  }
  EXPECT_EQ(pool->epochs_done(), 3U);
  for (std::uint64_t e = 0; e < 3; ++e) {
    EXPECT_TRUE(cov.exact(e)) << "epoch " << e;
  }
  EXPECT_EQ(cov.hits.size(), 3U) << "no samples of a fourth epoch";
}

TEST(SamplePool, GivenBackRangesComeOutNextInTheirEpoch) {
  auto pool = sample_pool::make(config_of(100, 10));
  ASSERT_TRUE(pool);
  auto lost = pool->take(25, 10);
  auto kept = pool->take(25, 10);
  pool->consume(kept);
  pool->give_back(lost);
  auto again = pool->take(25, 10);
  EXPECT_EQ(again, lost);
  EXPECT_EQ(pool->available(), 50U);
}

TEST(SamplePool, LateReturnsReopenTheOlderEpochBeforeTheNewer) {
  auto pool = sample_pool::make(config_of(60, 10));
  ASSERT_TRUE(pool);
  auto held = pool->take(30, 10);  // a member holds half of epoch 0
  auto rest = pool->take(40, 10);  // another takes the other half and 10 of epoch 1
  pool->consume(rest);
  EXPECT_EQ(pool->epochs_done(), 0U);
  pool->give_back(held);  // the first member dies
  auto next = pool->take(35, 10);
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(next.front().epoch, 0U);
  std::uint64_t from0 = 0;
  for (const auto& r : next) {
    from0 += r.epoch == 0 ? r.size() : 0;
  }
  EXPECT_EQ(from0, 30U) << "epoch 0's returned samples come out before more of epoch 1";
  pool->consume(next);
  EXPECT_EQ(pool->epochs_done(), 1U);
}

TEST(SamplePool, TakeRespectsTheRangeLimitAndMergesAdjacentBlocks) {
  auto pool = sample_pool::make(config_of(1000, 10));
  ASSERT_TRUE(pool);
  auto g = pool->take(1000, 3);
  EXPECT_LE(g.size(), 3U);
  EXPECT_LT(total(g), 1000U) << "the range limit caps the grant";
  // Adjacent pieces merge: the same range given back in two halves comes out as one.
  auto pool2 = sample_pool::make(config_of(100, 100));
  ASSERT_TRUE(pool2);
  auto whole = pool2->take(100, 1);
  ASSERT_EQ(whole.size(), 1U);
  std::vector<sample_range> halves{{0, 0, 50}, {0, 50, 100}};
  pool2->give_back(halves);
  auto back = pool2->take(100, 1);
  ASSERT_EQ(back.size(), 1U);
  EXPECT_EQ(back.front().size(), 100U);
}

TEST(SamplePool, SaveAndRestoreContinueTheEpoch) {
  auto pool = sample_pool::make(config_of(500, 32, 2));
  ASSERT_TRUE(pool);
  coverage cov(500);
  auto a = pool->take(300, 100);
  pool->consume(a);
  cov.add(a);
  auto outstanding = pool->take(100, 100);
  // A checkpoint keeps what a member holds: it goes back into the saved copy.
  auto copy = *pool;
  copy.give_back(outstanding);
  const auto state = copy.save();
  auto resumed = sample_pool::restore(pool->config(), state);
  ASSERT_TRUE(resumed) << resumed.error().message();
  EXPECT_EQ(resumed->save(), state);
  while (!resumed->finished()) {
    auto g = resumed->take(64, 100);
    ASSERT_FALSE(g.empty());
    resumed->consume(g);
    cov.add(g);
  }
  EXPECT_TRUE(cov.exact(0));
  EXPECT_TRUE(cov.exact(1));
}

TEST(SamplePool, RestoreRefusesAStateOfAnotherDataSet) {
  pool_state s;
  s.next_epoch = 1;
  s.open.push_back({0, 0, {{0, 200}}});
  EXPECT_FALSE(sample_pool::restore(config_of(100, 10), s));
  s.open[0].available = {{5, 5}};
  EXPECT_FALSE(sample_pool::restore(config_of(100, 10), s));
  s.open[0].available = {{0, 50}};
  s.open[0].consumed = 60;
  EXPECT_FALSE(sample_pool::restore(config_of(100, 10), s));
  s.open[0].consumed = 10;
  EXPECT_TRUE(sample_pool::restore(config_of(100, 10), s));
}

TEST(SamplePool, ShuffledSamplesHoldExactlyTheRangesPositions) {
  const std::uint64_t n = 100;
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> rs{{10, 20}, {50, 55}};
  auto a = shuffled_samples(rs, n, 1);
  auto b = shuffled_samples(rs, n, 1, 1);
  EXPECT_EQ(a.size(), 15U);
  EXPECT_NE(a, b);  // another round, another visiting order
  std::set<std::size_t> want;
  const epoch_permutation perm{1, 0, n};
  for (const auto& [lo, hi] : rs) {
    for (auto p = lo; p < hi; ++p) {
      want.insert(perm(p));
    }
  }
  EXPECT_EQ(std::set<std::size_t>(a.begin(), a.end()), want);
  EXPECT_EQ(std::set<std::size_t>(b.begin(), b.end()), want);
}

TEST(SamplePool, ShuffledSamplesFollowTheEpochOfEveryPosition) {
  const std::uint64_t n = 50;
  // The last 5 positions of epoch 2 and the first 5 of epoch 3, as one grant across the epoch's end.
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> rs{global_positions({2, 45, 50}, n),
                                                                global_positions({3, 0, 5}, n)};
  EXPECT_EQ(rs[0], (std::pair<std::uint64_t, std::uint64_t>{145, 150}));
  auto got = shuffled_samples(rs, n, 9);
  std::multiset<std::size_t> want;
  for (std::uint64_t p = 45; p < 50; ++p) {
    want.insert(epoch_permutation{9, 2, n}(p));
  }
  for (std::uint64_t p = 0; p < 5; ++p) {
    want.insert(epoch_permutation{9, 3, n}(p));
  }
  EXPECT_EQ(std::multiset<std::size_t>(got.begin(), got.end()), want);
}

TEST(EpochPermutation, IsABijectionOfEverySize) {
  for (std::uint64_t n : {1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, 1000, 1797, 4097}) {
    const epoch_permutation perm{3, 1, n};
    std::vector<int> hit(n, 0);
    for (std::uint64_t p = 0; p < n; ++p) {
      const auto s = perm(p);
      ASSERT_LT(s, n) << "n=" << n;
      ++hit[s];
    }
    EXPECT_EQ(std::count(hit.begin(), hit.end(), 1), static_cast<std::ptrdiff_t>(n)) << "n=" << n;
  }
}

TEST(EpochPermutation, DiffersByEpochAndSeedAndIsNotTheIdentity) {
  const std::uint64_t n = 1000;
  const auto first = [&](std::uint64_t seed, std::uint64_t epoch) {
    std::vector<std::uint64_t> v;
    const epoch_permutation perm{seed, epoch, n};
    for (std::uint64_t p = 0; p < 32; ++p) {
      v.push_back(perm(p));
    }
    return v;
  };
  EXPECT_EQ(first(1, 0), first(1, 0));
  EXPECT_NE(first(1, 0), first(1, 1));
  EXPECT_NE(first(1, 0), first(2, 0));
  std::vector<std::uint64_t> identity(32);
  std::iota(identity.begin(), identity.end(), std::uint64_t{0});
  EXPECT_NE(first(1, 0), identity);
}

// The Python worker (python/prsgd/order.py) must produce these very values; its test holds the same
// table (tests/integration/pytorch/package_test.py).
TEST(EpochPermutation, MatchesTheProtocolsTestVectors) {
  const auto first = [](std::uint64_t seed, std::uint64_t epoch, std::uint64_t n, std::uint64_t k) {
    std::vector<std::uint64_t> v;
    const epoch_permutation perm{seed, epoch, n};
    for (std::uint64_t p = 0; p < k; ++p) {
      v.push_back(perm(p));
    }
    return v;
  };
  EXPECT_EQ(first(0, 0, 10, 10), (std::vector<std::uint64_t>{9, 8, 1, 3, 6, 5, 4, 0, 7, 2}));
  EXPECT_EQ(first(42, 3, 1797, 12),
            (std::vector<std::uint64_t>{804, 588, 810, 1616, 555, 832, 426, 879, 689, 1103, 1496, 537}));
  EXPECT_EQ(
      first(0xfeedface12345678ULL, 7, 60000, 12),
      (std::vector<std::uint64_t>{47684, 34121, 57683, 14058, 3852, 41251, 34326, 20073, 10960, 46219, 27062, 53014}));
}

// A data set stored sorted by label: 10 classes of 1,000 samples each, samples [1000c, 1000c + 1000) of
// class c. The pool's blocks are blocks of positions, so a grant is spread over the classes anyway.
TEST(SamplePool, AGrantOfALabelSortedDataSetSpansTheClasses) {
  const std::uint64_t n = 10000;
  auto pool = sample_pool::make(config_of(n, 256, 2));
  ASSERT_TRUE(pool);
  int grants = 0;
  while (true) {
    auto g = pool->take(512, 512);
    if (g.empty()) {
      break;
    }
    std::vector<std::pair<std::uint64_t, std::uint64_t>> wire;
    for (const auto& r : g) {
      wire.push_back(global_positions(r, n));
    }
    std::set<std::size_t> classes;
    for (auto s : shuffled_samples(wire, n, pool->config().seed)) {
      classes.insert(s / 1000);
    }
    if (total(g) == 512) {
      EXPECT_GE(classes.size(), 8U) << "grant " << grants;
    }
    pool->consume(g);
    ++grants;
  }
  EXPECT_EQ(pool->epochs_done(), 2U);
  EXPECT_GE(grants, 39);
}

}  // namespace
