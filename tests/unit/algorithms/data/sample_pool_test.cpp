// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/sample_pool.hpp"

#include <gtest/gtest.h>

#include <map>
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

TEST(SamplePool, ShuffledIndicesHoldExactlyTheRanges) {
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> rs{{10, 20}, {50, 55}};
  auto a = shuffled_indices(rs, 1);
  auto b = shuffled_indices(rs, 2);
  EXPECT_EQ(a.size(), 15U);
  EXPECT_NE(a, b);
  std::set<std::size_t> s(a.begin(), a.end());
  EXPECT_EQ(s.size(), 15U);
  EXPECT_EQ(*s.begin(), 10U);
  EXPECT_EQ(*s.rbegin(), 54U);
}

}  // namespace
