// SPDX-License-Identifier: Apache-2.0
// The ring gather of x̄ among shard owners, sans IO: three shard_owner_cores whose SHARD_RELAYs are carried
// to the next core by the test. A member that names a home owner must get every slice of x̄ from that owner
// and nothing from the others (except, with a lossy dtype, the whole slice it cannot rebuild from a
// relayed change); a member without a home gets each slice from its own owner, as without the ring.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/shard_owner_core.hpp"
#include "prsgd/algorithms/averaging.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"

namespace prsgd::actors {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t K = 3;
constexpr std::uint64_t model_size = 7;  // slices of 3, 2 and 2 values
constexpr incarnation_t coordinator = 9;
constexpr std::uint64_t chunk = 2;  // values per SHARD_RELAY: slice 0 goes in two chunks

std::uint64_t length_of(std::uint64_t k) { return slice_begin(model_size, K, k + 1) - slice_begin(model_size, K, k); }
int chunks_of(std::uint64_t k) { return static_cast<int>((length_of(k) + chunk - 1) / chunk); }

flat_buffer values(std::vector<float> v) { return std::make_shared<const std::vector<float>>(std::move(v)); }

std::string endpoint_of(std::uint64_t k) { return "tcp://owner-" + std::to_string(k); }

// x̄_0: value i is i + 1.
std::vector<float> slice0(std::uint64_t k) {
  std::vector<float> v;
  for (auto i = slice_begin(model_size, K, k); i < slice_begin(model_size, K, k + 1); ++i) {
    v.push_back(static_cast<float>(i + 1));
  }
  return v;
}

// One SHARD_AVERAGE as a member's connection got it: from owner `from` on connection `conn`.
struct delivered {
  std::uint64_t from = 0;
  origin_t conn = 0;
  shard_average_msg msg;
};

class ShardRingTest : public ::testing::Test {
 protected:
  void set_up(algorithms::wire_dtype wire, bool ring = true, bool compress = false) {
    for (std::uint64_t k = 0; k < K; ++k) {
      shard_owner_config config{k, K, endpoint_of(k), 100 + k, 100ms, 4};
      config.relay_chunk = chunk;
      owners_.emplace_back(config, clk_);
      (void)owners_.back().start();
    }
    for (std::uint64_t k = 0; k < K; ++k) {
      const auto begin = slice_begin(model_size, K, k);
      shard_setup_msg setup{100 + k, coordinator, 0, k, K, begin, model_size, 100ms, values(slice0(k))};
      setup.wire = wire;
      setup.ring = ring;
      setup.ring_next = endpoint_of((k + 1) % K);
      setup.compress = compress;
      const auto a = owners_[k].on_coordinator(setup);
      EXPECT_EQ(a.connect_next, ring ? std::optional<std::string>{endpoint_of((k + 1) % K)} : std::nullopt);
      run(k, a);
    }
  }

  // Carries owner k's sends: relays to owner k + 1 (and on, recursively), averages to `got_`, and counts
  // each owner's relays.
  void run(std::uint64_t k, const owner_actions& a) {
    for (const auto& s : a.sends) {
      if (s.to_next) {
        ++relays_sent_[k];
        const auto& relay = std::get<shard_relay_msg>(s.msg);
        relays_compressed_ += relay.compressed ? 1 : 0;
        // Through the codec, as on the wire.
        auto decoded = decode_shard(encode(shard_msg{relay}), codec_limits{});
        ASSERT_TRUE(decoded.has_value()) << decoded.error().message();
        run((k + 1) % K, owners_[(k + 1) % K].on_relay(std::get<shard_relay_msg>(*decoded)));
      } else if (const auto* avg = std::get_if<shard_average_msg>(&s.msg)) {
        got_.push_back({k, s.peer, *avg});
      }
    }
  }

  // Member m attaches to every owner on connection 1000 * m + owner.
  void attach(member_id m, session_token token, std::optional<std::uint64_t> home) {
    for (std::uint64_t k = 0; k < K; ++k) {
      shard_slice_msg hello{m, token, 0, k, {}};
      hello.home = home;
      run(k, owners_[k].on_slice(hello, 1000 * m + k));
    }
  }

  void order(round_t round, bool combine, std::vector<shard_input> inputs, std::vector<shard_recipient> to) {
    for (std::uint64_t k = 0; k < K; ++k) {
      run(k, owners_[k].on_coordinator(order_msg(round, combine, inputs, to)));
    }
  }

  static shard_round_msg order_msg(round_t round, bool combine, std::vector<shard_input> inputs,
                                   std::vector<shard_recipient> to) {
    shard_round_msg o;
    o.averager_incarnation = coordinator;
    o.round = round;
    o.combine = combine;
    o.inputs = std::move(inputs);
    o.rule = static_cast<std::uint8_t>(algorithms::averaging_rule::by_samples);
    o.recipients = std::move(to);
    return o;
  }

  void round_one(std::vector<shard_recipient> to);

  // What member m got: for every shard, the owners that sent it and the last message.
  std::map<std::uint64_t, std::vector<delivered>> got_by(member_id m) const {
    std::map<std::uint64_t, std::vector<delivered>> out;
    for (const auto& d : got_) {
      if (d.msg.member == m) {
        out[d.msg.shard].push_back(d);
      }
    }
    return out;
  }

  fake_clock clk_;
  std::vector<shard_owner_core> owners_;
  std::vector<delivered> got_;
  std::map<std::uint64_t, int> relays_sent_;
  int relays_compressed_ = 0;
};

// The two members' slices of round 0 (member 1: x̄_0, member 2: 2·x̄_0), then round 1's order.
void ShardRingTest::round_one(std::vector<shard_recipient> to) {
  for (std::uint64_t k = 0; k < K; ++k) {
    auto twice = slice0(k);
    for (auto& v : twice) {
      v *= 2;
    }
    run(k, owners_[k].on_slice({1, 11, 0, k, values(slice0(k))}, 1000 + k));
    run(k, owners_[k].on_slice({2, 22, 0, k, values(twice)}, 2000 + k));
  }
  order(1, true, {{1, 11, 10, 4}, {2, 22, 10, 4}}, std::move(to));
}

TEST_F(ShardRingTest, AHomeMemberGetsAllOfXbarFromItsHomeAndNothingFromTheOthers) {
  set_up(algorithms::wire_dtype::f32);
  attach(1, 11, 2);             // home: owner 2
  attach(2, 22, std::nullopt);  // no owner on its host
  // x̄ as of the start (SETUP's slices) goes from every owner, as without the ring.
  EXPECT_TRUE(relays_sent_.empty());
  order(0, false, {}, {{1, 11}, {2, 22}});
  for (member_id m : {1, 2}) {
    const auto start = got_by(m);
    ASSERT_EQ(start.size(), K);
    for (std::uint64_t k = 0; k < K; ++k) {
      ASSERT_EQ(start.at(k).size(), 1U);
      EXPECT_EQ(start.at(k)[0].from, k);
      EXPECT_EQ(*start.at(k)[0].msg.model, slice0(k));
    }
  }

  // Round 1: every owner combines, sends its slice of x̄_1 around, and passes on the ones it gets, and no
  // further: owner k's slice stops at owner k − 1.
  got_.clear();
  round_one({{1, 11}, {2, 22}});
  for (std::uint64_t k = 0; k < K; ++k) {
    // Every slice but that of owner k + 1, chunk by chunk.
    EXPECT_EQ(relays_sent_[k], chunks_of(0) + chunks_of(1) + chunks_of(2) - chunks_of((k + 1) % K)) << "owner " << k;
    EXPECT_EQ(owners_[k].relayed_slices(), K - 1) << "owner " << k;
    auto expected = slice0(k);
    for (auto& v : expected) {
      v *= 1.5F;
    }
    EXPECT_EQ(*owners_[k].slice(), expected);
  }
  const auto home = got_by(1);
  ASSERT_EQ(home.size(), K);
  for (std::uint64_t k = 0; k < K; ++k) {
    ASSERT_EQ(home.at(k).size(), 1U) << "shard " << k << " went to the member once";
    EXPECT_EQ(home.at(k)[0].from, 2U) << "shard " << k << " came from the home owner";
    EXPECT_EQ(home.at(k)[0].conn, 1000U + 2) << "on the member's connection to its home";
    EXPECT_EQ(home.at(k)[0].msg.round, 1U);
    EXPECT_EQ(*home.at(k)[0].msg.model, *owners_[k].slice()) << "shard " << k << " is its owner's x̄_1";
  }
  const auto direct = got_by(2);
  ASSERT_EQ(direct.size(), K);
  for (std::uint64_t k = 0; k < K; ++k) {
    ASSERT_EQ(direct.at(k).size(), 1U);
    EXPECT_EQ(direct.at(k)[0].from, k) << "without a home each owner sends its own slice";
  }

  // A member that attaches later in the round gets x̄_1 from its home out of the relayed slices.
  got_.clear();
  attach(4, 44, 0);
  order(1, false, {}, {{4, 44}});
  const auto late = got_by(4);
  ASSERT_EQ(late.size(), K);
  for (std::uint64_t k = 0; k < K; ++k) {
    ASSERT_EQ(late.at(k).size(), 1U);
    EXPECT_EQ(late.at(k)[0].from, 0U);
    EXPECT_EQ(*late.at(k)[0].msg.model, *owners_[k].slice());
  }
}

TEST_F(ShardRingTest, ARelayThatOvertakesTheOrderWaitsForTheOwnersCombine) {
  set_up(algorithms::wire_dtype::f32);
  attach(1, 11, 1);
  for (std::uint64_t k = 0; k < K; ++k) {
    run(k, owners_[k].on_slice({1, 11, 0, k, values(slice0(k))}, 1000 + k));
  }
  // Owners 0 and 2 combine first: their relays reach owner 1 before its own order does.
  const auto o = order_msg(1, true, {{1, 11, 10, 4}}, {{1, 11}});
  run(0, owners_[0].on_coordinator(o));
  run(2, owners_[2].on_coordinator(o));
  EXPECT_EQ(owners_[1].round(), 0U);
  EXPECT_TRUE(got_by(1).empty()) << "owner 1 holds round 0 and must not serve round 1's slices yet";
  EXPECT_EQ(relays_sent_[1], chunks_of(0)) << "but it passed owner 0's slice on to owner 2 at once";
  run(1, owners_[1].on_coordinator(o));
  const auto got = got_by(1);
  ASSERT_EQ(got.size(), K);
  for (std::uint64_t k = 0; k < K; ++k) {
    ASSERT_EQ(got.at(k).size(), 1U);
    EXPECT_EQ(got.at(k)[0].msg.round, 1U);
    EXPECT_EQ(got.at(k)[0].from, 1U);
  }
}

TEST_F(ShardRingTest, ALossyChangeGoesAroundAndAMemberThatCannotUseItGetsTheWholeSliceFromItsOwner) {
  set_up(algorithms::wire_dtype::bf16);
  attach(1, 11, 0);
  attach(3, 33, 0);  // a joiner: attached, but it did not train from x̄_0
  for (std::uint64_t k = 0; k < K; ++k) {
    std::vector<float> change(slice0(k).size(), 0.5F);
    run(k, owners_[k].on_slice({1, 11, 0, k, values(change), algorithms::wire_dtype::bf16, true}, 1000 + k));
  }
  got_.clear();
  order(1, true, {{1, 11, 10, 4}}, {{1, 11}, {3, 33}});
  const auto holder = got_by(1);
  const auto joiner = got_by(3);
  ASSERT_EQ(holder.size(), K);
  ASSERT_EQ(joiner.size(), K);
  for (std::uint64_t k = 0; k < K; ++k) {
    ASSERT_EQ(holder.at(k).size(), 1U);
    EXPECT_EQ(holder.at(k)[0].from, 0U) << "the holder gets every change from its home";
    ASSERT_TRUE(holder.at(k)[0].msg.base.has_value());
    EXPECT_EQ(*holder.at(k)[0].msg.base, 0U);
    EXPECT_EQ(holder.at(k)[0].msg.dtype, algorithms::wire_dtype::bf16);
    // x̄_0 + change is the owner's slice, bit for bit.
    auto rebuilt = slice0(k);
    for (std::size_t i = 0; i < rebuilt.size(); ++i) {
      rebuilt[i] += (*holder.at(k)[0].msg.model)[i];
    }
    EXPECT_EQ(std::memcmp(rebuilt.data(), owners_[k].slice()->data(), rebuilt.size() * sizeof(float)), 0);

    ASSERT_EQ(joiner.at(k).size(), 1U) << "shard " << k;
    EXPECT_EQ(joiner.at(k)[0].from, k) << "the joiner gets the whole slice from its owner";
    EXPECT_FALSE(joiner.at(k)[0].msg.base.has_value());
    EXPECT_EQ(*joiner.at(k)[0].msg.model, *owners_[k].slice());
  }
}

TEST_F(ShardRingTest, RelaysOfAnotherCoordinatorOrOfTheWrongSizeAreDropped) {
  set_up(algorithms::wire_dtype::f32);
  attach(1, 11, 1);
  shard_relay_msg stale{coordinator + 1, 0, 0, values({1.0F, 2.0F})};
  EXPECT_TRUE(owners_[1].on_relay(stale).sends.empty());
  shard_relay_msg wrong{coordinator, 0, 0, values({1.0F})};
  EXPECT_TRUE(owners_[1].on_relay(wrong).sends.empty());
  shard_relay_msg own{coordinator, 0, 1, values({1.0F, 2.0F})};
  EXPECT_TRUE(owners_[1].on_relay(own).sends.empty()) << "an owner's own slice never comes back to it";
  shard_relay_msg far{coordinator, 7, 0, values({1.0F, 2.0F})};
  EXPECT_TRUE(owners_[1].on_relay(far).sends.empty()) << "a round far ahead of the owner";
  shard_relay_msg misplaced{coordinator, 1, 0, values({1.0F, 2.0F})};
  misplaced.offset = 1;
  EXPECT_TRUE(owners_[1].on_relay(misplaced).sends.empty()) << "a chunk off the chunk grid";
  shard_relay_msg past_the_end{coordinator, 1, 0, values({1.0F})};
  past_the_end.offset = 4;
  EXPECT_TRUE(owners_[1].on_relay(past_the_end).sends.empty()) << "a chunk beyond the slice";
  shard_relay_msg good{coordinator, 1, 0, values({1.0F, 2.0F})};
  EXPECT_EQ(owners_[1].on_relay(good).sends.size(), 1U) << "a chunk of the next round is passed on";
  EXPECT_TRUE(owners_[1].on_relay(good).sends.empty()) << "the same chunk again is not";
  EXPECT_TRUE(got_.empty());
}

TEST_F(ShardRingTest, WithoutTheRingEveryOwnerServesItsOwnSliceWhateverHomeTheMemberNames) {
  set_up(algorithms::wire_dtype::f32, false);
  attach(1, 11, 2);
  attach(2, 22, 2);
  got_.clear();
  round_one({{1, 11}});
  EXPECT_TRUE(relays_sent_.empty());
  const auto got = got_by(1);
  ASSERT_EQ(got.size(), K);
  for (std::uint64_t k = 0; k < K; ++k) {
    ASSERT_EQ(got.at(k).size(), 1U);
    EXPECT_EQ(got.at(k)[0].from, k);
  }
}

TEST_F(ShardRingTest, ASetupWithAnotherNextOwnerReconnects) {
  set_up(algorithms::wire_dtype::f32);
  shard_setup_msg again{101, coordinator, 0, 1, K, slice_begin(model_size, K, 1), model_size, 100ms, values(slice0(1))};
  again.ring = true;
  again.ring_next = endpoint_of(2);
  EXPECT_FALSE(owners_[1].on_coordinator(again).connect_next) << "the same SETUP again changes nothing";
  again.ring_next = "tcp://owner-2-restarted";
  EXPECT_EQ(owners_[1].on_coordinator(again).connect_next, std::optional<std::string>{"tcp://owner-2-restarted"});
}

}  // namespace
}  // namespace prsgd::actors

namespace prsgd::actors {
namespace {

// SHARD_SETUP's `compress`: the relays go to another host and are asked to travel compressed, and so is every
// slice for a member whose home is not this owner; the slices a home owner hands its member over loopback
// are not. Compression is lossless, so x̄ is the same as without it.
TEST_F(ShardRingTest, WithCompressionEverythingButTheHomeOwnersSlicesIsSentCompressed) {
  set_up(algorithms::wire_dtype::f32, true, true);
  attach(1, 11, 2);             // home: owner 2
  attach(2, 22, std::nullopt);  // no owner on its host
  order(0, false, {}, {{1, 11}, {2, 22}});
  got_.clear();
  round_one({{1, 11}, {2, 22}});
  int relays = 0;
  for (const auto& [k, n] : relays_sent_) {
    relays += n;
  }
  EXPECT_GT(relays, 0);
  EXPECT_EQ(relays_compressed_, relays);
  const auto home = got_by(1);
  ASSERT_EQ(home.size(), K);
  for (std::uint64_t k = 0; k < K; ++k) {
    ASSERT_EQ(home.at(k).size(), 1U);
    EXPECT_FALSE(home.at(k)[0].msg.compressed) << "shard " << k << " from the home owner on the member's host";
    auto expected = slice0(k);
    for (auto& v : expected) {
      v *= 1.5F;
    }
    EXPECT_EQ(*home.at(k)[0].msg.model, expected);
  }
  const auto direct = got_by(2);
  ASSERT_EQ(direct.size(), K);
  for (std::uint64_t k = 0; k < K; ++k) {
    ASSERT_EQ(direct.at(k).size(), 1U);
    EXPECT_TRUE(direct.at(k)[0].msg.compressed) << "shard " << k << " to a member on another host";
  }
}

}  // namespace
}  // namespace prsgd::actors
