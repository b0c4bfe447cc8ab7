// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/checkpoint_store.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "memory_checkpoint_store.hpp"

namespace prsgd::actors {
namespace {

checkpoint_state state_of(round_t round, incarnation_t written_by = 1) {
  checkpoint_state s;
  s.averager_incarnation = written_by;
  s.round = round;
  s.rounds_completed = round;
  s.model = {static_cast<float>(round), 0.5F};
  s.members = {{7, 1, 4, 2.0}};
  return s;
}

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::path(::testing::TempDir()) / ("prsgd_store_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

// ---- the contract every checkpoint_store keeps (file and memory) ---------------------------------

struct store_kind {
  std::string name;
  std::function<std::unique_ptr<checkpoint_store>(const std::filesystem::path&)> make;
};

class CheckpointStoreContractTest : public ::testing::TestWithParam<store_kind> {
 protected:
  void SetUp() override {
    dir = fresh_dir(GetParam().name + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    store = GetParam().make(dir);
    ASSERT_NE(store, nullptr);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::filesystem::path dir;
  std::unique_ptr<checkpoint_store> store;
};

TEST_P(CheckpointStoreContractTest, WritesListsPrunesAndReadsTheNewest) {
  EXPECT_FALSE(store->read_newest().has_value());
  EXPECT_TRUE(store->list().empty());
  for (round_t r : {3U, 10U, 7U}) {
    ASSERT_TRUE(store->write(state_of(r)).has_value());
  }
  EXPECT_EQ(store->list(), (std::vector<round_t>{10, 7, 3}));
  auto newest = store->read_newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->round, 10U);
  EXPECT_EQ(newest->model, state_of(10).model);
  ASSERT_TRUE(store->write(state_of(10, 2)).has_value()) << "the same round again replaces it";
  EXPECT_EQ(store->read_newest()->averager_incarnation, 2U);
  ASSERT_TRUE(store->prune(2).has_value());
  EXPECT_EQ(store->list(), (std::vector<round_t>{10, 7}));
  ASSERT_TRUE(store->prune(0).has_value()) << "keeps at least one";
  EXPECT_EQ(store->list(), (std::vector<round_t>{10}));
}

// Resuming from a non-finite x̄ or momentum would stall the job across restarts: such a checkpoint is
// skipped like a corrupt one.
TEST_P(CheckpointStoreContractTest, ACheckpointHoldingNanOrInfIsSkippedLikeACorruptOne) {
  ASSERT_TRUE(store->write(state_of(3)).has_value());
  auto bad = state_of(6);
  bad.model[0] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(store->write(bad).has_value());
  EXPECT_EQ(store->read_newest()->round, 3U);
  bad = state_of(9);
  bad.outer_momentum = {std::numeric_limits<float>::quiet_NaN(), 0.0F};
  ASSERT_TRUE(store->write(bad).has_value());
  EXPECT_EQ(store->read_newest()->round, 3U);
}

TEST_P(CheckpointStoreContractTest, NextIncarnationGrowsAndNeverGoesBelowACheckpoint) {
  EXPECT_EQ(store->next_incarnation().value(), 1U);
  EXPECT_EQ(store->next_incarnation().value(), 2U);
  ASSERT_TRUE(store->write(state_of(1, 6)).has_value());
  EXPECT_EQ(store->next_incarnation().value(), 7U);
}

INSTANTIATE_TEST_SUITE_P(
    Stores, CheckpointStoreContractTest,
    ::testing::Values(store_kind{"file",
                                 [](const std::filesystem::path& dir) -> std::unique_ptr<checkpoint_store> {
                                   auto s = file_checkpoint_store::make(dir);
                                   if (!s) {
                                     return nullptr;
                                   }
                                   return std::make_unique<file_checkpoint_store>(std::move(*s));
                                 }},
                      store_kind{"memory",
                                 [](const std::filesystem::path&) -> std::unique_ptr<checkpoint_store> {
                                   return std::make_unique<memory_checkpoint_store>();
                                 }}),
    [](const ::testing::TestParamInfo<store_kind>& param) { return param.param.name; });

// ---- the file store ------------------------------------------------------------------------------

class FileCheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::filesystem::path dir;
};

TEST_F(FileCheckpointStoreTest, NamesFilesByRoundAndSkipsDamagedOnesWhenReading) {
  auto made = file_checkpoint_store::make(dir / "nested");
  ASSERT_TRUE(made.has_value()) << "the directory is created";
  auto& store = *made;
  for (round_t r : {7U, 10U}) {
    ASSERT_TRUE(store.write(state_of(r)).has_value());
  }
  auto files = store.files();
  ASSERT_EQ(files.size(), 2U);
  EXPECT_EQ(files[0].filename(), "ckpt-000000000010.bin");
  EXPECT_EQ(files[0], store.path_of(10));
  std::filesystem::resize_file(files[0], 12);
  EXPECT_EQ(store.read_newest()->round, 7U) << "a truncated newest falls back to the previous one";
  { std::ofstream{files[1], std::ios::binary | std::ios::trunc} << "garbage"; }
  EXPECT_FALSE(store.read_newest().has_value());
  EXPECT_EQ(store.list().size(), 2U) << "list shows damaged checkpoints too";
  for (const auto& e : std::filesystem::directory_iterator(dir / "nested")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "no temp files left behind";
  }
}

TEST_F(FileCheckpointStoreTest, IncarnationSurvivesTheLossOfItsFile) {
  {
    auto store = file_checkpoint_store::make(dir).value();
    EXPECT_EQ(store.next_incarnation().value(), 1U);
    ASSERT_TRUE(store.write(state_of(1, 4)).has_value());
    std::filesystem::remove(dir / "incarnation");
    EXPECT_EQ(store.next_incarnation().value(), 5U);
  }  // the next process may lock the directory once this one is gone
  auto again = file_checkpoint_store::make(dir).value();
  EXPECT_EQ(again.next_incarnation().value(), 6U) << "recorded on disk for the next process";
}

TEST_F(FileCheckpointStoreTest, OpenReadsAnExistingDirectoryAndCreatesNone) {
  auto missing = file_checkpoint_store::open(dir);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, errc::not_found);
  EXPECT_FALSE(std::filesystem::exists(dir));
  ASSERT_TRUE(file_checkpoint_store::make(dir).value().write(state_of(3)).has_value());
  auto reader = file_checkpoint_store::open(dir);
  ASSERT_TRUE(reader.has_value());
  EXPECT_EQ(reader->read_newest()->round, 3U);
}

TEST_F(FileCheckpointStoreTest, UnusableDirectoryIsAnIoError) {
  { std::ofstream{dir.string() + "_file"} << "x"; }
  auto made = file_checkpoint_store::make(std::filesystem::path(dir.string() + "_file") / "sub");
  ASSERT_FALSE(made.has_value());
  EXPECT_EQ(made.error().code, errc::io_error);
  std::filesystem::remove(dir.string() + "_file");
}

TEST_F(FileCheckpointStoreTest, ASecondWriterOfTheDirectoryIsRefusedWhileTheFirstHoldsIt) {
  auto first = file_checkpoint_store::make(dir);
  ASSERT_TRUE(first.has_value());
  auto second = file_checkpoint_store::make(dir);
  ASSERT_FALSE(second.has_value()) << "two averagers must never share a checkpoint directory";
  EXPECT_EQ(second.error().code, errc::already_exists);
  EXPECT_NE(second.error().message().find("in use by another averager (pid " + std::to_string(::getpid()) + ")"),
            std::string::npos)
      << second.error().message();
  EXPECT_TRUE(file_checkpoint_store::open(dir).has_value()) << "readers (export) take no lock";
  std::optional<file_checkpoint_store> holder{std::move(*first)};  // the lock moves with the store
  EXPECT_FALSE(file_checkpoint_store::make(dir).has_value());
  holder.reset();
  EXPECT_TRUE(file_checkpoint_store::make(dir).has_value()) << "released when the holder is destroyed";
}

TEST_F(FileCheckpointStoreTest, CheckpointsAreOwnerOnlyAndNeverWrittenThroughAPlantedLink) {
  auto store = file_checkpoint_store::make(dir).value();
  const auto victim = dir.string() + "_victim";
  { std::ofstream{victim} << "keep"; }
  // The name a fixed-name writer would use for round 3's temp file, planted as a link to another file.
  std::filesystem::create_symlink(victim, dir / ".ckpt-000000000003.bin.tmp");
  ASSERT_TRUE(store.write(state_of(3)).has_value());
  std::ifstream in{victim};
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "keep") << "the write followed a symlink";
  EXPECT_EQ(store.read_newest()->round, 3U);
  for (const auto* name : {"ckpt-000000000003.bin", "incarnation", "lock"}) {
    if (std::string{name} == "incarnation") {
      ASSERT_TRUE(store.next_incarnation().has_value());
    }
    const auto perms = std::filesystem::status(dir / name).permissions();
    EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
              std::filesystem::perms::none)
        << name << " must be readable by its owner only";
  }
  std::filesystem::remove(victim);
}

TEST_F(FileCheckpointStoreTest, SetAsideMovesTheOldJobOutOfTheWay) {
  auto store = file_checkpoint_store::make(dir).value();
  EXPECT_TRUE(store.set_aside().value().empty()) << "nothing to move";
  ASSERT_TRUE(store.write(state_of(4)).has_value());
  ASSERT_TRUE(store.write(state_of(8)).has_value());
  auto moved = store.set_aside();
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(*moved, dir / "replaced-1");
  EXPECT_FALSE(store.read_newest().has_value());
  EXPECT_TRUE(std::filesystem::exists(dir / "replaced-1" / "ckpt-000000000008.bin"));
  ASSERT_TRUE(store.write(state_of(2)).has_value());
  EXPECT_EQ(store.set_aside().value(), dir / "replaced-2") << "an earlier set-aside job is kept";
}

// ---- the in-memory fake's damage hooks -----------------------------------------------------------

TEST(MemoryCheckpointStoreTest, DamagedCheckpointsAreSkippedAndFailingWritesChangeNothing) {
  memory_checkpoint_store store;
  ASSERT_TRUE(store.write(state_of(1)).has_value());
  ASSERT_TRUE(store.write(state_of(2)).has_value());
  store.corrupt(2);
  EXPECT_EQ(store.read_newest()->round, 1U);
  store.truncate(1, 10);
  EXPECT_FALSE(store.read_newest().has_value());
  store.fail_writes(true);
  EXPECT_EQ(store.write(state_of(3)).error().code, errc::io_error);
  EXPECT_EQ(store.list(), (std::vector<round_t>{2, 1}));
  EXPECT_EQ(store.writes(), 2U);
}

}  // namespace
}  // namespace prsgd::actors
