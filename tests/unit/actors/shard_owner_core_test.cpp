// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/shard_owner_core.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "prsgd/actors/codec.hpp"
#include "prsgd/algorithms/averaging.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;

flat_buffer values(std::vector<float> v) { return std::make_shared<const std::vector<float>>(std::move(v)); }

template <class M>
std::vector<M> sent(const owner_actions& a) {
  std::vector<M> out;
  for (const auto& s : a.sends) {
    if (const auto* m = std::get_if<M>(&s.msg)) {
      out.push_back(*m);
    }
  }
  return out;
}

// Owner 1 of 2 of a 5-value model holds values [3, 5).
class ShardOwnerCoreTest : public ::testing::Test {
 protected:
  ShardOwnerCoreTest() : owner_(shard_owner_config{1, 2, "tcp://owner", 42, 100ms, 4}, clk_) {
    (void)owner_.start();
    shard_setup_msg setup{42, 9, 5, 1, 2, slice_begin(5, 2, 1), 5, 100ms, values({1.0F, 2.0F})};
    (void)owner_.on_coordinator(setup);
  }
  fake_clock clk_;
  shard_owner_core owner_;
};

TEST_F(ShardOwnerCoreTest, SlicesAreContiguousAndCoverTheModel) {
  EXPECT_EQ(slice_begin(5, 2, 0), 0U);
  EXPECT_EQ(slice_begin(5, 2, 1), 3U);
  EXPECT_EQ(slice_begin(5, 2, 2), 5U);
  EXPECT_EQ(slice_begin(7, 3, 3), 7U);
  EXPECT_TRUE(owner_.ready());
  EXPECT_EQ(owner_.round(), 5U);
}

// The ack's distance to x̄ on a slice long enough for the owner's vector loop (and a tail after it): the sum of
// squares within double rounding of a long double reference, and a NaN or Inf anywhere refused.
TEST(ShardOwnerCoreLongSliceTest, AcksTheDistanceToTheSliceOfALongModel) {
  fake_clock clk;
  shard_owner_core owner(shard_owner_config{0, 1, "tcp://owner", 42, 100ms, 4}, clk);
  (void)owner.start();
  constexpr std::size_t n = 1003;
  std::vector<float> base(n);
  std::vector<float> mine(n);
  long double want = 0;
  for (std::size_t i = 0; i < n; ++i) {
    base[i] = 0.001F * static_cast<float>(i % 97) - 0.05F;
    mine[i] = base[i] + 0.0003F * static_cast<float>((i * 7) % 13) - 0.002F;
    const long double d = static_cast<long double>(mine[i]) - static_cast<long double>(base[i]);
    want += d * d;
  }
  (void)owner.on_coordinator(shard_setup_msg{42, 9, 5, 0, 1, 0, n, 100ms, values(base)});
  auto acks = sent<shard_ack_msg>(owner.on_slice({1, 11, 5, 0, values(mine)}, 100));
  ASSERT_EQ(acks.size(), 1U);
  EXPECT_TRUE(acks[0].ok);
  EXPECT_NEAR(acks[0].norm2, static_cast<double>(want), 1e-12 * static_cast<double>(want));
  for (const std::size_t at : {std::size_t{5}, std::size_t{n - 1}}) {
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      auto broken = mine;
      broken[at] = bad;
      acks = sent<shard_ack_msg>(owner.on_slice({2 + at, 22, 5, 0, values(broken)}, 200));
      ASSERT_EQ(acks.size(), 1U);
      EXPECT_FALSE(acks[0].ok) << "a non-finite value at " << at;
    }
  }
}

TEST_F(ShardOwnerCoreTest, AcksSlicesAndCombinesOnlyTheNamedMembers) {
  auto a = owner_.on_slice({1, 11, 5, 1, values({3.0F, 2.0F})}, 100);
  auto acks = sent<shard_ack_msg>(a);
  ASSERT_EQ(acks.size(), 1U);
  EXPECT_TRUE(acks[0].ok);
  EXPECT_DOUBLE_EQ(acks[0].norm2, 4.0);  // (3 - 1)^2 + (2 - 2)^2
  (void)owner_.on_slice({2, 22, 5, 1, values({5.0F, 6.0F})}, 200);
  // A member the coordinator does not name (say, removed by a deadline) is left out.
  (void)owner_.on_slice({3, 33, 5, 1, values({100.0F, 100.0F})}, 300);
  // Wrong size and NaN are acknowledged as not ok and never held.
  EXPECT_FALSE(sent<shard_ack_msg>(owner_.on_slice({4, 44, 5, 1, values({1.0F})}, 400))[0].ok);
  EXPECT_FALSE(sent<shard_ack_msg>(
                   owner_.on_slice({5, 55, 5, 1, values({std::numeric_limits<float>::quiet_NaN(), 1.0F})}, 500))[0]
                   .ok);
  EXPECT_EQ(owner_.pending_slices(), 3U);

  shard_round_msg order;
  order.averager_incarnation = 9;
  order.round = 6;
  order.combine = true;
  order.inputs = {{1, 11, 32, 4}, {2, 22, 32, 4}};
  order.rule = static_cast<std::uint8_t>(algorithms::averaging_rule::by_samples);
  order.recipients = {{1, 11}, {2, 22}, {6, 66}};
  order.fetch = true;
  a = owner_.on_coordinator(order);
  EXPECT_EQ(owner_.round(), 6U);
  ASSERT_EQ(*owner_.slice(), (std::vector<float>{4.0F, 4.0F}));
  const auto averages = sent<shard_average_msg>(a);
  ASSERT_EQ(averages.size(), 2U) << "member 6 has not attached yet";
  EXPECT_EQ(a.sends[0].peer, 100U);
  const auto reports = sent<shard_report_msg>(a);
  ASSERT_EQ(reports.size(), 1U);
  EXPECT_TRUE(reports[0].ok);
  ASSERT_TRUE(reports[0].model);
  EXPECT_EQ(reports[0].checksum, slice_checksum(*owner_.slice()));
  // Member 6 attaches later (a SHARD_SLICE without a model) and gets x̄_6's slice then.
  a = owner_.on_slice({6, 66, 0, 1, {}}, 600);
  ASSERT_EQ(sent<shard_average_msg>(a).size(), 1U);
  EXPECT_EQ(a.sends[0].peer, 600U);
  // A slice of the closed round is late.
  EXPECT_TRUE(owner_.on_slice({1, 11, 5, 1, values({3.0F, 2.0F})}, 100).sends.empty());
}

TEST_F(ShardOwnerCoreTest, AMissingInputIsReportedNotAveragedAround) {
  shard_round_msg order;
  order.averager_incarnation = 9;
  order.round = 6;
  order.combine = true;
  order.inputs = {{1, 11, 32, 4}};
  const auto a = owner_.on_coordinator(order);
  const auto reports = sent<shard_report_msg>(a);
  ASSERT_EQ(reports.size(), 1U);
  EXPECT_FALSE(reports[0].ok);
  EXPECT_NE(reports[0].why.find("member 1"), std::string::npos);
  EXPECT_EQ(owner_.round(), 5U);
}

TEST_F(ShardOwnerCoreTest, ASliceUnderAnotherTokenDoesNotReplaceTheMembers) {
  (void)owner_.on_slice({1, 11, 5, 1, values({3.0F, 2.0F})}, 100);
  (void)owner_.on_slice({1, 999, 5, 1, values({50.0F, 50.0F})}, 700);  // a forger naming member 1
  shard_round_msg order;
  order.averager_incarnation = 9;
  order.round = 6;
  order.combine = true;
  order.inputs = {{1, 11, 32, 4}};
  (void)owner_.on_coordinator(order);
  EXPECT_EQ(*owner_.slice(), (std::vector<float>{3.0F, 2.0F}));
}

// A member that built the owner's slice of x̄ itself (a fresh job's x̄_0, made from the same seed) says so with
// its checksum when it attaches; the owner confirms it instead of sending it. Only the first slice a member
// gets can be one it holds, and a wrong checksum gets the slice.
TEST_F(ShardOwnerCoreTest, AMemberThatHoldsTheSliceGetsItConfirmedNotSent) {
  const std::uint64_t mine = slice_checksum(std::vector<float>{1.0F, 2.0F});
  shard_round_msg start;
  start.averager_incarnation = 9;
  start.round = 5;
  start.recipients = {{7, 77}, {8, 88}, {9, 99}};
  (void)owner_.on_coordinator(start);
  shard_slice_msg holds{7, 77, 0, 1, {}};
  holds.holds = mine;
  auto a = owner_.on_slice(holds, 700);
  auto averages = sent<shard_average_msg>(a);
  ASSERT_EQ(averages.size(), 1U);
  EXPECT_FALSE(averages[0].model) << "no values for a member that holds them";
  ASSERT_TRUE(averages[0].held);
  EXPECT_EQ(*averages[0].held, mine);
  EXPECT_EQ(averages[0].round, 5U);

  shard_slice_msg other{8, 88, 0, 1, {}};
  other.holds = mine ^ 1U;  // another model (another seed)
  averages = sent<shard_average_msg>(owner_.on_slice(other, 800));
  ASSERT_EQ(averages.size(), 1U);
  ASSERT_TRUE(averages[0].model);
  EXPECT_EQ(*averages[0].model, (std::vector<float>{1.0F, 2.0F}));
  EXPECT_FALSE(averages[0].held);
  averages = sent<shard_average_msg>(owner_.on_slice({9, 99, 0, 1, {}}, 900));
  ASSERT_EQ(averages.size(), 1U);
  EXPECT_TRUE(averages[0].model) << "a member that names nothing gets the slice";

  // The next round: member 7 trained, so whatever it said it held no longer counts.
  (void)owner_.on_slice({7, 77, 5, 1, values({1.0F, 2.0F})}, 700);
  shard_round_msg order;
  order.averager_incarnation = 9;
  order.round = 6;
  order.combine = true;
  order.inputs = {{7, 77, 32, 4}};
  order.recipients = {{7, 77}};
  a = owner_.on_coordinator(order);
  ASSERT_EQ(*owner_.slice(), (std::vector<float>{1.0F, 2.0F})) << "x̄_6 happens to equal x̄_5";
  averages = sent<shard_average_msg>(a);
  ASSERT_EQ(averages.size(), 1U);
  EXPECT_TRUE(averages[0].model);
  EXPECT_FALSE(averages[0].held);
}

TEST(ShardCodecTest, ShardMessagesRoundTrip) {
  shard_round_msg order;
  order.averager_incarnation = 3;
  order.round = 17;
  order.combine = true;
  order.inputs = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  order.rule = 2;
  order.aggregate = 1;
  order.trim = 0.25;
  order.recipients = {{1, 2}};
  order.fetch = true;
  auto back = decode_shard(encode(shard_msg{order}));
  ASSERT_TRUE(back) << back.error().message();
  const auto& o = std::get<shard_round_msg>(*back);
  EXPECT_EQ(o.inputs, order.inputs);
  EXPECT_EQ(o.recipients, order.recipients);
  EXPECT_TRUE(o.fetch);
  EXPECT_DOUBLE_EQ(o.trim, 0.25);

  auto slice = decode_shard(encode(shard_msg{shard_slice_msg{4, 5, 6, 1, values({1.0F, 2.0F})}}));
  ASSERT_TRUE(slice);
  EXPECT_EQ(*std::get<shard_slice_msg>(*slice).model, (std::vector<float>{1.0F, 2.0F}));
  auto attach = decode_shard(encode(shard_msg{shard_slice_msg{4, 5, 0, 1, {}}}));
  ASSERT_TRUE(attach);
  EXPECT_FALSE(std::get<shard_slice_msg>(*attach).model);
  EXPECT_FALSE(std::get<shard_slice_msg>(*attach).holds);
  shard_slice_msg holds{4, 5, 0, 1, {}};
  holds.holds = 0xfedcba9876543210ULL;
  attach = decode_shard(encode(shard_msg{holds}));
  ASSERT_TRUE(attach);
  EXPECT_EQ(std::get<shard_slice_msg>(*attach).holds, holds.holds);
  shard_average_msg held{4, 5, 0, 1, {}};
  held.held = 0x0123456789abcdefULL;
  auto confirmed = decode_shard(encode(shard_msg{held}));
  ASSERT_TRUE(confirmed);
  EXPECT_FALSE(std::get<shard_average_msg>(*confirmed).model);
  EXPECT_EQ(std::get<shard_average_msg>(*confirmed).held, held.held);

  // A sliced MODEL is a header; with a payload it is malformed.
  model_msg m;
  m.sliced = true;
  auto header = decode_to_averager(encode(to_averager{m}));
  ASSERT_TRUE(header);
  EXPECT_TRUE(std::get<model_msg>(*header).sliced);
  m.params = values({1.0F});
  EXPECT_FALSE(decode_to_averager(encode(to_averager{m})));
  // A worker message is not a shard message.
  EXPECT_FALSE(decode_shard(encode(to_averager{join_msg{}})));
}

// A bf16 job: slices come as changes against x̄_r, and the owner's new slice is x̄_r plus its own encoded
// change, which goes to the members that trained from x̄_r (others get the whole slice as f32).
TEST(ShardOwnerCoreLossyTest, ChangesGoBothWaysAndTheSliceIsWhatMembersRebuild) {
  fake_clock clk;
  shard_owner_core owner{shard_owner_config{1, 2, "tcp://owner", 42, 100ms, 4}, clk};
  (void)owner.start();
  shard_setup_msg setup{42, 9, 5, 1, 2, slice_begin(5, 2, 1), 5, 100ms, values({1.0F, 2.0F})};
  setup.wire = algorithms::wire_dtype::bf16;
  (void)owner.on_coordinator(setup);
  const auto slice5 = *owner.slice();

  // Member 1 sends the change (+2, 0): its slice is x̄_5 + change, so the norm is that of the change.
  auto a = owner.on_slice({1, 11, 5, 1, values({2.0F, 0.0F}), algorithms::wire_dtype::bf16, true}, 100);
  ASSERT_EQ(sent<shard_ack_msg>(a).size(), 1U);
  EXPECT_DOUBLE_EQ(sent<shard_ack_msg>(a)[0].norm2, 4.0);
  (void)owner.on_slice({2, 22, 5, 1, values({0.01F, 0.0F}), algorithms::wire_dtype::bf16, true}, 200);
  (void)owner.on_slice({3, 0, 0, 1, {}}, 300);  // member 3 (a joiner) only attaches

  shard_round_msg order;
  order.averager_incarnation = 9;
  order.round = 6;
  order.combine = true;
  order.inputs = {{1, 11, 32, 4}, {2, 22, 32, 4}};
  order.rule = static_cast<std::uint8_t>(algorithms::averaging_rule::by_samples);
  order.recipients = {{1, 11}, {3, 0}};
  a = owner.on_coordinator(order);
  ASSERT_EQ(owner.round(), 6U);
  const auto averages = sent<shard_average_msg>(a);
  ASSERT_EQ(averages.size(), 2U);
  const auto& change = averages[0].member == 1 ? averages[0] : averages[1];
  const auto& whole = averages[0].member == 1 ? averages[1] : averages[0];
  ASSERT_TRUE(change.base.has_value());
  EXPECT_EQ(*change.base, 5U);
  EXPECT_EQ(change.dtype, algorithms::wire_dtype::bf16);
  EXPECT_FALSE(whole.base.has_value());
  EXPECT_EQ(whole.dtype, algorithms::wire_dtype::f32);
  EXPECT_EQ(*whole.model, *owner.slice());
  // The change survives the codec exactly, and x̄_5 + change is the owner's slice bit for bit.
  auto decoded = decode_shard(encode(shard_msg{change}), codec_limits{});
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message();
  const auto& back = std::get<shard_average_msg>(*decoded);
  ASSERT_TRUE(back.base.has_value());
  std::vector<float> rebuilt = slice5;
  for (std::size_t i = 0; i < rebuilt.size(); ++i) {
    rebuilt[i] += (*back.model)[i];
  }
  EXPECT_EQ(std::memcmp(rebuilt.data(), owner.slice()->data(), rebuilt.size() * sizeof(float)), 0);
  EXPECT_NE(*owner.slice(), slice5);
}

// A newer coordinator incarnation (a resume) sets the owner up again: its error-feedback residual restarts
// from zero, as a resumed star averager's does, so the owner encodes exactly what a fresh owner would.
// bf16 keeps 8 significant bits: in [0.25, 0.5) its values are k/512.
TEST(ShardOwnerCoreLossyTest, ASetupOfANewerCoordinatorStartsTheResidualFromZero) {
  fake_clock clk;
  const auto setup_by = [](incarnation_t coordinator) {
    shard_setup_msg setup{42, coordinator, 5, 1, 2, slice_begin(5, 2, 1), 5, 100ms, values({1.0F, 2.0F})};
    setup.wire = algorithms::wire_dtype::bf16;
    return setup;
  };
  // Member `m` sends the change (`c`, 0) against x̄_5 and gets x̄_6 back; returns the change it gets.
  const auto round_with = [&](shard_owner_core& owner, incarnation_t coordinator, member_id m, float c) {
    (void)owner.on_slice({m, m * 11, 5, 1, values({c, 0.0F}), algorithms::wire_dtype::bf16, true}, 100);
    shard_round_msg order;
    order.averager_incarnation = coordinator;
    order.round = 6;
    order.combine = true;
    order.inputs = {{m, m * 11, 32, 4}};
    order.rule = static_cast<std::uint8_t>(algorithms::averaging_rule::by_samples);
    order.recipients = {{m, m * 11}};
    const auto averages = sent<shard_average_msg>(owner.on_coordinator(order));
    EXPECT_EQ(averages.size(), 1U);
    EXPECT_TRUE(!averages.empty() && averages[0].base == std::optional<round_t>{5}) << "a change against x̄_5";
    return averages.empty() ? std::vector<float>{} : *averages[0].model;
  };

  shard_owner_core owner{shard_owner_config{1, 2, "tcp://owner", 42, 100ms, 4}, clk};
  (void)owner.start();
  (void)owner.on_coordinator(setup_by(9));
  // 170.5/512 is a tie: it goes as 170/512 and leaves +0.5/512 as the residual.
  EXPECT_EQ(round_with(owner, 9, 1, 170.5F / 512), (std::vector<float>{170.0F / 512, 0.0F}));
  // With that residual, 170.25/512 would go as 171/512 (170.75/512 rounded); after the resume's SETUP it
  // goes as 170/512, as from an owner that never ran a round.
  (void)owner.on_coordinator(setup_by(10));
  EXPECT_EQ(owner.round(), 5U);
  EXPECT_EQ(*owner.slice(), (std::vector<float>{1.0F, 2.0F})) << "the checkpoint's slice";
  const auto resumed = round_with(owner, 10, 2, 170.25F / 512);
  EXPECT_EQ(resumed, (std::vector<float>{170.0F / 512, 0.0F})) << "the residual of the old incarnation is gone";

  shard_owner_core fresh{shard_owner_config{1, 2, "tcp://owner", 43, 100ms, 4}, clk};
  (void)fresh.start();
  (void)fresh.on_coordinator(setup_by(10));
  EXPECT_EQ(round_with(fresh, 10, 2, 170.25F / 512), resumed);
  EXPECT_EQ(*fresh.slice(), *owner.slice());

  // The same owner without the SETUP in between keeps the residual (what the test above rules out).
  algorithms::error_feedback kept;
  (void)kept.compress(std::vector<float>{170.5F / 512}, algorithms::wire_dtype::bf16);
  EXPECT_EQ(kept.compress(std::vector<float>{170.25F / 512}, algorithms::wire_dtype::bf16),
            (std::vector<float>{171.0F / 512}));
}

}  // namespace
}  // namespace prsgd::actors
