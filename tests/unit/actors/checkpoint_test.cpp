// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/checkpoint.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace prsgd::actors {
namespace {

checkpoint_state sample_state(round_t round) {
  checkpoint_state s;
  s.averager_incarnation = 4;
  s.round = round;
  s.model = {1.0F, -2.5F, 3.25F};
  s.members = {{1, 2, 8, 12.5}, {5, 1, 3, 0}};
  s.rounds_completed = round;
  s.outer_momentum = {0.5F, 0.25F, 0.0F};
  s.arrival_history = {1.0, 1.5};
  s.late = 3;
  s.duplicate = 2;
  s.rejected = 1;
  return s;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::filesystem::path(::testing::TempDir()) /
          ("prsgd_ckpt_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::filesystem::path dir;
};

TEST(CheckpointCodecTest, RoundTripsEveryField) {
  const auto s = sample_state(9);
  auto d = decode_checkpoint(encode_checkpoint(s));
  ASSERT_TRUE(d.has_value()) << d.error().message();
  EXPECT_EQ(d->averager_incarnation, 4U);
  EXPECT_EQ(d->round, 9U);
  EXPECT_EQ(d->model, s.model);
  ASSERT_EQ(d->members.size(), 2U);
  EXPECT_EQ(d->members[0].member, 1U);
  EXPECT_EQ(d->members[0].incarnation, 2U);
  EXPECT_EQ(d->members[0].interval, 8U);
  EXPECT_DOUBLE_EQ(d->members[0].speed, 12.5);
  EXPECT_EQ(d->outer_momentum, s.outer_momentum);
  EXPECT_EQ(d->arrival_history, s.arrival_history);
  EXPECT_EQ(d->late, 3U);
  EXPECT_EQ(d->duplicate, 2U);
  EXPECT_EQ(d->rejected, 1U);
}

TEST(CheckpointCodecTest, RoundTripsTheModelIdentity) {
  auto s = sample_state(2);
  s.identity = checkpoint_model{"fmnist-cnn", 1, 28, 28, 10, "fashion-mnist", "0123abcd"};
  auto d = decode_checkpoint(encode_checkpoint(s));
  ASSERT_TRUE(d.has_value()) << d.error().message();
  ASSERT_TRUE(d->identity.has_value());
  EXPECT_EQ(*d->identity, *s.identity);
  s.identity.reset();
  d = decode_checkpoint(encode_checkpoint(s));
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->identity.has_value());
}

// Version 1 (before the model identity) is version 5's payload without the trailing identity, finished
// and pool bytes.
TEST(CheckpointCodecTest, ReadsVersionOneWithoutIdentity) {
  auto bytes = encode_checkpoint(sample_state(5));
  bytes.pop_back();  // the "no pool" flag
  bytes.pop_back();  // the finished flag
  bytes.pop_back();  // the "no identity" flag
  const std::uint32_t version = 1;
  std::memcpy(bytes.data() + 8, &version, 4);
  const std::uint64_t size = bytes.size() - 24;
  std::memcpy(bytes.data() + 12, &size, 8);
  const auto crc = static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), bytes.data() + 24, static_cast<uInt>(size)));
  std::memcpy(bytes.data() + 20, &crc, 4);
  auto d = decode_checkpoint(bytes);
  ASSERT_TRUE(d.has_value()) << d.error().message();
  EXPECT_EQ(d->round, 5U);
  EXPECT_EQ(d->model, sample_state(5).model);
  EXPECT_FALSE(d->identity.has_value());
}

TEST(CheckpointCodecTest, RoundTripsTheSamplePool) {
  auto s = sample_state(4);
  prsgd::algorithms::pool_state pool;
  pool.next_epoch = 3;
  pool.epochs_done = 1;
  pool.open.push_back({1, 40, {{100, 200}, {0, 60}}});
  pool.open.push_back({2, 0, {{300, 356}}});
  s.pool = pool;
  auto d = decode_checkpoint(encode_checkpoint(s));
  ASSERT_TRUE(d.has_value()) << d.error().message();
  ASSERT_TRUE(d->pool.has_value());
  EXPECT_EQ(*d->pool, pool);
  s.pool.reset();
  d = decode_checkpoint(encode_checkpoint(s));
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->pool.has_value());
}

// Version 4 has version 5's layout, but its pool holds sample indices in storage order: it is read and
// flagged, so that the averager can refuse it with one line instead of training other samples.
TEST(CheckpointCodecTest, FlagsAVersionFourPoolAsStorageOrder) {
  auto s = sample_state(4);
  prsgd::algorithms::pool_state pool;
  pool.next_epoch = 1;
  pool.open.push_back({0, 40, {{100, 200}}});
  s.pool = pool;
  auto bytes = encode_checkpoint(s);
  auto d = decode_checkpoint(bytes);
  ASSERT_TRUE(d.has_value()) << d.error().message();
  EXPECT_FALSE(d->pool_in_storage_order);
  const std::uint32_t version = 4;
  std::memcpy(bytes.data() + 8, &version, 4);
  d = decode_checkpoint(bytes);
  ASSERT_TRUE(d.has_value()) << d.error().message();
  ASSERT_TRUE(d->pool.has_value());
  EXPECT_EQ(*d->pool, pool);
  EXPECT_TRUE(d->pool_in_storage_order);
}

TEST(CheckpointCodecTest, RoundTripsTheFinishedFlag) {
  auto s = sample_state(3);
  s.finished = true;
  auto d = decode_checkpoint(encode_checkpoint(s));
  ASSERT_TRUE(d.has_value()) << d.error().message();
  EXPECT_TRUE(d->finished);
  s.finished = false;
  d = decode_checkpoint(encode_checkpoint(s));
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->finished);
}

// A checkpoint whose CRC holds but whose x̄ or momentum is not finite is refused like a corrupt one.
TEST(CheckpointCodecTest, RefusesNanOrInfInTheModelOrMomentum) {
  auto s = sample_state(4);
  s.model[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(decode_checkpoint(encode_checkpoint(s)).error().code, errc::decode_failed);
  s = sample_state(4);
  s.outer_momentum = {0.5F, std::numeric_limits<float>::infinity()};
  EXPECT_EQ(decode_checkpoint(encode_checkpoint(s)).error().code, errc::decode_failed);
}

TEST(CheckpointCodecTest, DetectsBadMagicVersionTruncationAndChecksum) {
  const auto good = encode_checkpoint(sample_state(1));
  auto bytes = good;
  bytes[0] = 'X';
  EXPECT_EQ(decode_checkpoint(bytes).error().code, errc::decode_failed);
  bytes = good;
  bytes[8] = 99;  // version
  EXPECT_EQ(decode_checkpoint(bytes).error().code, errc::decode_failed);
  for (std::size_t n : {std::size_t{0}, std::size_t{10}, good.size() - 1}) {
    bytes.assign(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(decode_checkpoint(bytes).error().code, errc::decode_failed) << n;
  }
  bytes = good;
  bytes.back() ^= 0x01;
  EXPECT_EQ(decode_checkpoint(bytes).error().code, errc::checksum_mismatch);
}

TEST_F(CheckpointTest, AtomicWriteFailsCleanlyInAMissingDirectory) {
  auto r = write_file_atomically(dir / "missing" / "file.bin", {1, 2, 3});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errc::io_error);
}

}  // namespace
}  // namespace prsgd::actors
