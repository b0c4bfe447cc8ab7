// SPDX-License-Identifier: Apache-2.0
// The speech job end to end: ops/make-kws-data (24 sessions, 288 clips), then `prsgd local --model kws-cnn` with
// two worker processes, twice on the same data directory. The first job writes <dir>/features.cache, the second
// reads it in every process and leaves it untouched.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.hpp"

namespace {

namespace fs = std::filesystem;
using prsgd::test::read_file;

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

struct job_result {
  int status = -1;
  std::string output;                // the launcher's stdout + stderr (progress lines, child summary)
  std::vector<std::string> metrics;  // metrics.jsonl lines
  std::string averager_log;
  std::string worker_logs;  // both workers' logs, concatenated
};

constexpr int kRounds = 3;

job_result run_job(const fs::path& dir, const fs::path& data, const std::string& name) {
  const fs::path logs = dir / name;
  const fs::path out = dir / (name + ".out");
  job_result r;
  r.status = prsgd::test::run({PRSGD_BINARY, "local", "--model",         "kws-cnn",
                               "--dataset",  "kws",   "--data-dir",      data,
                               "--workers",  "2",     "--rounds",        std::to_string(kRounds),
                               "--interval", "4",     "--batch",         "16",
                               "--lr",       "0.1",   "--progress",      "plain",
                               "--log-dir",  logs,    "--metrics-jsonl", logs / "metrics.jsonl"},
                              {.out = out})
                 .status;
  r.output = read_file(out);
  r.metrics = prsgd::test::lines_of(read_file(logs / "metrics.jsonl"));
  r.averager_log = read_file(logs / "averager.log");
  r.worker_logs = read_file(logs / "worker-0.log") + read_file(logs / "worker-1.log");
  return r;
}

void expect_finished(const job_result& r) {
  EXPECT_EQ(r.status, 0) << r.output << r.averager_log;
  // Progress reached the last round, and the averager wrote its done line to the log and the metrics.
  EXPECT_NE(r.output.find("round " + std::to_string(kRounds) + "/" + std::to_string(kRounds)), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("prsgd local: done: test accuracy "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" after " + std::to_string(kRounds) + " rounds"), std::string::npos) << r.output;
  EXPECT_NE(r.averager_log.find("prsgd averager: done: " + std::to_string(kRounds) + " rounds"), std::string::npos)
      << r.averager_log;
  ASSERT_EQ(r.metrics.size(), static_cast<std::size_t>(kRounds + 1));
  const std::string& done = r.metrics.back();
  EXPECT_NE(done.find("\"event\":\"done\""), std::string::npos) << done;
  EXPECT_NE(done.find("\"rounds\":" + std::to_string(kRounds)), std::string::npos) << done;
  EXPECT_EQ(done.find("\"test_acc\":null"), std::string::npos) << "no final evaluation: " << done;
  for (int i = 0; i < kRounds; ++i) {
    EXPECT_NE(r.metrics[static_cast<std::size_t>(i)].find("\"round\":" + std::to_string(i) + ","), std::string::npos)
        << r.metrics[static_cast<std::size_t>(i)];
    EXPECT_NE(r.metrics[static_cast<std::size_t>(i)].find("\"submissions\":2,"), std::string::npos)
        << r.metrics[static_cast<std::size_t>(i)];
  }
  EXPECT_NE(r.output.find("worker-1   exited with status 0"), std::string::npos) << r.output;
}

TEST(SpeechJobTest, KwsCnnTrainsOnTwoWorkerProcessesAndReusesTheFeatureCache) {
  prsgd::test::scratch_dir dir{"prsgd-speech-job"};
  const fs::path data = dir.path() / "kws-tiny";
  const auto made = prsgd::test::run(
      {PRSGD_SOURCE_DIR "/ops/make-kws-data", "--quiet", "--preset", "tiny", "--sessions", "24", "--out", data},
      {.out = dir / "make-kws-data.txt"});
  ASSERT_EQ(made.status, 0) << made.out;
  const fs::path cache = data / "features.cache";
  ASSERT_FALSE(fs::exists(cache));

  // Job 1: no cache yet. The process holding <cache>.lock featurises the clips and installs the cache by
  // rename; the others wait and read it, so exactly one complete cache file remains and no temporary file.
  const job_result first = run_job(dir.path(), data, "job1");
  expect_finished(first);
  ASSERT_TRUE(fs::exists(cache));
  const std::string all_first = first.averager_log + first.worker_logs;
  const int featurised = count(all_first, ": featurised 240 train + 48 test clips");
  EXPECT_GE(featurised, 1) << all_first;
  EXPECT_EQ(featurised + count(all_first, "240 train + 48 test clips from cache"), 3) << all_first;
  for (const auto& e : fs::directory_iterator(data)) {
    EXPECT_EQ(e.path().filename().string().find("features.cache.tmp"), std::string::npos) << e.path();
  }
  struct stat before {};
  ASSERT_EQ(::stat(cache.c_str(), &before), 0);
  const std::string cache_bytes = read_file(cache);

  // Job 2 on the same directory: all three processes read the cache, none featurises, and the file is not
  // rewritten (same inode, same modification time, same bytes).
  const job_result second = run_job(dir.path(), data, "job2");
  expect_finished(second);
  const std::string all_second = second.averager_log + second.worker_logs;
  EXPECT_EQ(count(all_second, "240 train + 48 test clips from cache"), 3) << all_second;
  EXPECT_EQ(count(all_second, "featurised"), 0) << all_second;
  struct stat after {};
  ASSERT_EQ(::stat(cache.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_EQ(read_file(cache), cache_bytes);
}

}  // namespace
