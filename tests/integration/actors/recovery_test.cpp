// SPDX-License-Identifier: Apache-2.0
// Failures of real `prsgd averager` / `prsgd worker` processes talking ZeroMQ on 127.0.0.1, training
// Fashion-MNIST: a worker killed with SIGKILL is dropped after the heartbeat timeout and a restarted one
// rejoins; a worker given SIGTERM leaves at once; an averager killed with SIGKILL, or stopped with
// SIGTERM, resumes from its checkpoint and no round is applied twice or lost; a seeded schedule of
// SIGKILLs leaves one metrics line per round and one done line; a finished job is not run again, and a
// checkpoint directory belongs to one job and one averager at a time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "metrics_lines.hpp"
#include "prsgd_job.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

using line = test::metrics_line;

class RecoveryTest : public ::testing::Test {
 protected:
  // Every process is on loopback. With the default allowance of 1 Mbit/s a worker killed between announcing its
  // MODEL and sending it would be removed up to 17 s (2.1 MB at 1 Mbit/s) after the heartbeat timeout, as
  // docs/decisions/0024 says; these tests time the heartbeat rule itself.
  static constexpr const char* kLoopbackMbit = "100000";

  std::vector<std::string> averager_args(int rounds, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> a{"--model",
                               "fmnist-mlp",
                               "--rounds",
                               std::to_string(rounds),
                               "--interval",
                               "4",
                               "--batch",
                               "32",
                               "--lr",
                               "0.05",
                               "--heartbeat-ms",
                               "100",
                               "--heartbeat-timeout-ms",
                               std::to_string(timeout_ms_),
                               "--metrics-jsonl",
                               metrics_,
                               "--progress",
                               "off",
                               "--eval-every",
                               "0",
                               "--slowest-link-mbit",
                               kLoopbackMbit};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  /// Starts the averager (a restart comes back on the first one's endpoint); returns its pid, -1 when it
  /// did not come up (a test failure has been recorded).
  pid_t start_averager(const std::vector<std::string>& args, const std::string& name = "averager") {
    const bool restart = !job_.averager_endpoint().empty();
    auto started = restart ? job_.start_averager(args, name, job_.averager_endpoint())  // where workers look
                           : job_.start_averager(args, name);
    EXPECT_TRUE(started) << name << " did not listen\n" << log(name);
    return started ? started->pid : -1;
  }

  pid_t start_worker(int id, const std::string& batch = "32", const std::string& slowdown_ms = "15") {
    return job_.start_worker(id, {"--model", "fmnist-mlp", "--batch", batch, "--lr", "0.05", "--heartbeat-ms", "100",
                                  "--heartbeat-timeout-ms", std::to_string(timeout_ms_), "--slowdown-ms", slowdown_ms,
                                  "--progress", "off", "--slowest-link-mbit", kLoopbackMbit});
  }

  /// Waits for `pid` to exit within scaled(`timeout`); returns its status (128+signal), or nullopt.
  std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout) { return job_.wait_exit(pid, timeout); }

  /// Returns the metrics file as it is now.
  std::string metrics_text() const {
    std::ifstream in{metrics_, std::ios::binary};
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  /// Checks the metrics file of a finished job line by line, as written (no line superseded or
  /// skipped): rounds 0..n-1 in order, each exactly once, then one done line; `trained` rounds trained.
  /// Returns the number of resumed lines.
  int expect_one_line_per_round(std::uint64_t trained) const {
    const auto all = lines();
    double expected_round = 0;
    int resumed = 0;
    int done = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto& l = all[i];
      if (l.event == "resumed") {
        ++resumed;
      } else if (l.event == "done") {
        ++done;
        EXPECT_EQ(i + 1, all.size()) << "the done line is the last";
        EXPECT_EQ(l.get("rounds"), expected_round) << "done counts every closed round";
        EXPECT_EQ(l.get("trained_rounds"), static_cast<double>(trained));
      } else if (round_line(l)) {
        EXPECT_EQ(l.get("round"), expected_round++) << "line " << i << ": each round once, in order";
        EXPECT_EQ(l.get("duplicate"), 0);
        EXPECT_LE(l.get("submissions"), l.get("members"));
        EXPECT_EQ(l.arrival.size(), static_cast<std::size_t>(l.get("submissions")));
      }
    }
    EXPECT_EQ(done, 1) << "one done line per job";
    return resumed;
  }

  std::vector<line> lines() const { return test::read_metrics_lines(metrics_); }

  /// Prints what a failed kill schedule needs to be understood: the metrics file and the end of each
  /// averager's log and of the workers' logs.
  void dump_for_failure(const std::vector<std::string>& averagers) const {
    const auto tail = [](const std::string& text) {
      std::size_t at = text.size();
      for (int n = 0; n < 40 && at > 0; ++n) {
        at = text.rfind('\n', at - 1);
        if (at == std::string::npos) {
          return text;
        }
      }
      return text.substr(at + 1);
    };
    std::printf("--- %s\n%s", metrics_.c_str(), metrics_text().c_str());
    for (const auto& name : averagers) {
      std::printf("--- %s (end)\n%s", name.c_str(), tail(log(name)).c_str());
    }
    for (const std::string name : {"worker-0", "worker-1"}) {
      std::printf("--- %s (end)\n%s", name.c_str(), tail(log(name)).c_str());
    }
  }

  /// Waits until a metrics line satisfies `pred`; returns it.
  std::optional<line> wait_line(const std::function<bool(const line&)>& pred, std::chrono::milliseconds timeout) {
    std::optional<line> found;
    test::wait_until(
        [&] {
          for (const auto& l : lines()) {
            if (pred(l)) {
              found = l;
              return true;
            }
          }
          return false;
        },
        timeout);
    return found;
  }

  std::string log(const std::string& name) const { return job_.log(name); }

  static bool round_line(const line& l) { return l.is_round(); }

  /// True when `dir` holds a finished checkpoint (a ckpt-<round>.bin file).
  static bool has_checkpoint(const std::string& dir) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const auto name = entry.path().filename().string();
      if (name.rfind("ckpt-", 0) == 0 && entry.path().extension() == ".bin") {
        return true;
      }
    }
    return false;
  }

  test::prsgd_job job_{PRSGD_BINARY, "prsgd-recovery"};
  std::string metrics_ = job_.path("metrics.jsonl");
  // Scaled like every other deadline: a ThreadSanitizer worker on a loaded machine can fall silent for
  // longer than a second while it loads its data.
  int timeout_ms_ = static_cast<int>(test::scaled(1000ms).count());
};

TEST_F(RecoveryTest, KilledWorkerIsDroppedAfterTheTimeoutAndARestartedOneRejoins) {
  const pid_t avg = start_averager(averager_args(70, {"--min-workers", "3"}));
  ASSERT_GT(avg, 0);
  std::vector<pid_t> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(start_worker(i));
  }
  ASSERT_TRUE(wait_line([](const line& l) { return round_line(l) && l.get("round") >= 5; }, 60s)) << log("averager");
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(workers[2], SIGKILL);
  ASSERT_TRUE(wait_exit(workers[2], 5s));
  auto removed = wait_line([](const line& l) { return round_line(l) && l.get("removed") >= 1; }, 20s);
  ASSERT_TRUE(removed) << "the killed worker was never removed\n" << log("averager");
  const auto removal_latency = std::chrono::steady_clock::now() - killed_at;
  EXPECT_LT(removal_latency, test::scaled(10s))
      << "removal must follow the heartbeat timeout (1 s), not hang the barrier";
  ASSERT_TRUE(wait_line(
      [&](const line& l) { return round_line(l) && l.get("round") > removed->get("round") && l.get("members") == 2; },
      20s))
      << "the barrier must go on with the two survivors\n"
      << log("averager");

  start_worker(2);  // a new incarnation of the same worker id
  ASSERT_TRUE(wait_line(
      [&](const line& l) { return round_line(l) && l.get("round") > removed->get("round") && l.get("members") == 3; },
      30s))
      << "the restarted worker never rejoined\n"
      << log("averager") << log("worker-2");
  auto status = wait_exit(avg, 120s);
  ASSERT_TRUE(status) << log("averager");
  EXPECT_EQ(*status, 0) << log("averager");

  const auto all = lines();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(expect_one_line_per_round(70), 0);
  EXPECT_GT(all.back().get("test_acc"), 0.6);
  for (pid_t w : workers) {
    if (w != workers[2]) {
      EXPECT_EQ(wait_exit(w, 15s), 0) << "a worker exits 0 after STOP";
    }
  }
}

TEST_F(RecoveryTest, WorkerGivenSigtermLeavesAtOnceInsteadOfTimingOut) {
  timeout_ms_ = 60'000;  // only LEAVE can explain a fast removal
  const pid_t avg = start_averager(averager_args(1000, {"--min-workers", "2"}));
  ASSERT_GT(avg, 0);
  const pid_t w0 = start_worker(0);
  const pid_t w1 = start_worker(1);
  ASSERT_TRUE(wait_line([](const line& l) { return round_line(l) && l.get("round") >= 3; }, 60s)) << log("averager");
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(w1, SIGTERM);
  auto status = wait_exit(w1, 10s);
  ASSERT_TRUE(status) << log("worker-1");
  EXPECT_EQ(*status, 3) << "a worker stopped by SIGTERM exits 3\n" << log("worker-1");
  EXPECT_NE(log("worker-1").find("left the job"), std::string::npos) << log("worker-1");
  auto removed = wait_line([](const line& l) { return round_line(l) && l.get("removed") >= 1; }, 10s);
  ASSERT_TRUE(removed) << log("averager");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, test::scaled(10s));
  ASSERT_TRUE(wait_line(
      [&](const line& l) { return round_line(l) && l.get("round") > removed->get("round") && l.get("members") == 1; },
      10s))
      << log("averager");
  // Without a checkpoint directory, SIGTERM on the averager ends the job: STOP, final evaluation, done line.
  ::kill(avg, SIGTERM);
  status = wait_exit(avg, 30s);
  ASSERT_TRUE(status) << log("averager");
  EXPECT_EQ(*status, 3) << "stopped by a signal, not finished\n" << log("averager");
  EXPECT_EQ(lines().back().event, "done");
  EXPECT_EQ(wait_exit(w0, 15s), 0) << "the remaining worker gets STOP and exits 0\n" << log("worker-0");
}

TEST_F(RecoveryTest, KilledAveragerResumesFromItsCheckpointAndNoRoundCountsTwice) {
  const auto ckpt = job_.path("ckpt");
  const std::vector<std::string> extra{"--min-workers", "2", "--checkpoint-dir", ckpt, "--checkpoint-every", "5"};
  const pid_t avg = start_averager(averager_args(40, extra));
  ASSERT_GT(avg, 0);
  const pid_t w0 = start_worker(0);
  const pid_t w1 = start_worker(1);
  ASSERT_TRUE(wait_line([](const line& l) { return round_line(l) && l.get("round") >= 12; }, 60s)) << log("averager");
  ::kill(avg, SIGKILL);
  ASSERT_TRUE(wait_exit(avg, 5s));
  double last_before = -1;
  for (const auto& l : lines()) {
    if (round_line(l)) {
      last_before = l.get("round");
    }
  }
  const pid_t avg2 = start_averager(averager_args(40, extra), "averager-2");
  ASSERT_GT(avg2, 0);
  auto status = wait_exit(avg2, 120s);
  ASSERT_TRUE(status) << log("averager-2");
  EXPECT_EQ(*status, 0) << log("averager-2");

  const auto all = lines();
  std::size_t resumed_at = all.size();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].event == "resumed") {
      resumed_at = i;
    }
  }
  ASSERT_LT(resumed_at, all.size()) << "no resumed line";
  const double resumed_round = all[resumed_at].get("round");
  EXPECT_GT(resumed_round, 0) << "it resumes a checkpoint (every 5 trained rounds; empty rounds may come between)";
  // The checkpoint of round r is written after round r-1's line, so the resumed round is at most one
  // past the last line seen, and no line before it is missing.
  EXPECT_LE(resumed_round, last_before + 1) << "it cannot resume a round whose predecessor has no line";
  EXPECT_EQ(expect_one_line_per_round(40), 1);
  EXPECT_GT(all.back().get("test_acc"), 0.6);
  EXPECT_EQ(wait_exit(w0, 15s), 0) << log("worker-0");
  EXPECT_EQ(wait_exit(w1, 15s), 0) << log("worker-1");
}

TEST_F(RecoveryTest, AveragerSigtermCheckpointsTheOpenRoundAndARestartLosesNothing) {
  const auto ckpt = job_.path("ckpt");
  const std::vector<std::string> extra{"--min-workers", "2", "--checkpoint-dir", ckpt, "--checkpoint-every", "1000"};
  const pid_t avg = start_averager(averager_args(30, extra));
  ASSERT_GT(avg, 0);
  const pid_t w0 = start_worker(0);
  const pid_t w1 = start_worker(1);
  ASSERT_TRUE(wait_line([](const line& l) { return round_line(l) && l.get("round") >= 7; }, 60s)) << log("averager");
  ::kill(avg, SIGTERM);
  auto status = wait_exit(avg, 15s);
  ASSERT_TRUE(status) << log("averager");
  EXPECT_EQ(*status, 3) << "checkpointed on SIGTERM: stopped, not finished\n" << log("averager");
  double last_before = -1;
  for (const auto& l : lines()) {
    EXPECT_NE(l.event, "done") << "a suspended averager does not end the job";
    if (round_line(l)) {
      last_before = l.get("round");
    }
  }
  // Each worker notices the silence (heartbeat timeout) and keeps trying to rejoin instead of exiting.
  for (const std::string w : {"worker-0", "worker-1"}) {
    EXPECT_TRUE(job_.wait_for_log(w, "averager silent; rejoining", 30s)) << log(w);
  }
  EXPECT_EQ(::waitpid(w0, nullptr, WNOHANG), 0) << "workers wait for the averager to come back";
  EXPECT_EQ(::waitpid(w1, nullptr, WNOHANG), 0);

  const pid_t avg2 = start_averager(averager_args(30, extra), "averager-2");
  ASSERT_GT(avg2, 0);
  status = wait_exit(avg2, 120s);
  ASSERT_TRUE(status) << log("averager-2");
  EXPECT_EQ(*status, 0) << log("averager-2");
  const auto all = lines();
  const line* resumed = nullptr;
  for (const auto& l : all) {
    if (l.event == "resumed") {
      resumed = &l;
    }
  }
  ASSERT_NE(resumed, nullptr);
  EXPECT_EQ(resumed->get("round"), last_before + 1) << "the checkpoint holds the open round: no closed round is lost";
  EXPECT_EQ(expect_one_line_per_round(30), 1);
  EXPECT_EQ(wait_exit(w0, 15s), 0) << log("worker-0");
  EXPECT_EQ(wait_exit(w1, 15s), 0) << log("worker-1");
}

// The recovery scenario end to end: 1 averager + 3 workers train fmnist-mlp with I = 8; one worker is
// killed with SIGKILL, a fourth joins, the averager is killed with SIGKILL and restarted from its
// checkpoint. The run completes above 85% and the metrics show every membership change and every
// round's counted models exactly once.
TEST_F(RecoveryTest, WorkerCrashJoinAndAveragerCrashInOneRunStillReach85Percent) {
  const auto ckpt = job_.path("ckpt");
  auto args = [&] {
    auto a = averager_args(
        120, {"--min-workers", "3", "--max-workers", "4", "--checkpoint-dir", ckpt, "--checkpoint-every", "10"});
    for (std::size_t i = 0; i + 1 < a.size(); ++i) {
      if (a[i] == "--interval") {
        a[i + 1] = "8";
      } else if (a[i] == "--batch") {
        a[i + 1] = "64";
      }
    }
    return a;
  };
  const pid_t avg = start_averager(args());
  ASSERT_GT(avg, 0);
  std::vector<pid_t> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(start_worker(i, "64", "4"));
  }
  ASSERT_TRUE(wait_line([](const line& l) { return round_line(l) && l.get("round") >= 15; }, 90s)) << log("averager");
  ::kill(workers[2], SIGKILL);
  ASSERT_TRUE(wait_exit(workers[2], 5s));
  ASSERT_TRUE(wait_line([](const line& l) { return round_line(l) && l.get("removed") >= 1; }, 20s)) << log("averager");
  workers[2] = start_worker(3, "64", "4");  // the fourth worker joins; the averager numbers members 1, 2, 3, 4
  ASSERT_TRUE(wait_line([](const line& l) { return round_line(l) && l.arrival.contains(4); }, 30s))
      << "the fourth worker never entered an average\n"
      << log("averager") << log("worker-3");
  ASSERT_TRUE(wait_line([](const line& l) { return round_line(l) && l.get("round") >= 50; }, 90s)) << log("averager");
  ::kill(avg, SIGKILL);
  ASSERT_TRUE(wait_exit(avg, 5s));
  const pid_t avg2 = start_averager(args(), "averager-2");
  ASSERT_GT(avg2, 0);
  auto status = wait_exit(avg2, 180s);
  ASSERT_TRUE(status) << log("averager-2");
  EXPECT_EQ(*status, 0) << log("averager-2");

  EXPECT_EQ(expect_one_line_per_round(120), 1);
  // The history, as older readers compute it: a resumed line supersedes the lines of the rounds it
  // resumes (the resumed averager has already dropped them from the file).
  std::map<long, line> history;
  bool resumed = false;
  bool removal = false;
  bool admission = false;
  const auto all = lines();
  for (const auto& l : all) {
    if (l.event == "resumed") {
      resumed = true;
      std::erase_if(history, [&](const auto& kv) { return kv.first >= static_cast<long>(l.get("round")); });
    } else if (round_line(l)) {
      const auto r = static_cast<long>(l.get("round"));
      EXPECT_FALSE(history.contains(r)) << "round " << r << " closed twice in one incarnation";
      history[r] = l;
      removal = removal || l.get("removed") >= 1;
      admission = admission || l.get("admitted") >= 1;
    }
  }
  EXPECT_TRUE(resumed);
  EXPECT_TRUE(removal) << "the crash of worker 2 shows as a removal";
  EXPECT_TRUE(admission) << "worker 3's join shows as an admission";
  ASSERT_EQ(static_cast<double>(history.size()), all.back().get("rounds"));
  long r = 0;
  for (const auto& [round, l] : history) {
    EXPECT_EQ(round, r++);
    EXPECT_EQ(l.arrival.size(), static_cast<std::size_t>(l.get("submissions")))
        << "round " << round << ": every counted model is listed once";
    EXPECT_LE(l.get("submissions"), l.get("members"));
    EXPECT_EQ(l.get("duplicate"), 0);
  }
  // The resumed averager numbers the rejoining workers anew: three of them, the crashed one gone.
  EXPECT_EQ(history.rbegin()->second.get("submissions"), 3);
  ASSERT_EQ(all.back().event, "done");
  EXPECT_GE(all.back().get("test_acc"), 0.85);
  for (std::size_t i = 0; i < workers.size(); ++i) {
    EXPECT_EQ(wait_exit(workers[i], 15s), 0) << "worker slot " << i;
  }
}

// A finished job restarted says so in one line, exits 0 and appends nothing; another job on the same
// directory is refused (status 2) unless told --fresh; a second averager on a directory in use fails.
TEST_F(RecoveryTest, AFinishedJobIsNotRunAgainAndACheckpointDirectoryHoldsOneJob) {
  const auto ckpt = job_.path("ckpt");
  const std::vector<std::string> extra{"--checkpoint-dir", ckpt, "--checkpoint-every", "2"};
  const pid_t avg = start_averager(averager_args(6, extra));
  ASSERT_GT(avg, 0);
  const pid_t w0 = start_worker(0);
  auto status = wait_exit(avg, 120s);
  ASSERT_TRUE(status) << log("averager");
  ASSERT_EQ(*status, 0) << log("averager");
  EXPECT_EQ(wait_exit(w0, 15s), 0) << log("worker-0");
  EXPECT_EQ(expect_one_line_per_round(6), 0);
  const std::string finished = metrics_text();

  auto averager = [&](std::vector<std::string> more) {
    std::vector<std::string> a{"averager", "--listen", "tcp://127.0.0.1:*", "--log-level", "warn"};
    auto base = averager_args(6, extra);
    a.insert(a.end(), base.begin(), base.end());
    a.insert(a.end(), more.begin(), more.end());
    return job_.run(a, 60s);
  };
  auto one_line = [](const std::string& text) {
    return !text.empty() && text.back() == '\n' && text.find('\n') == text.size() - 1;
  };
  auto again = averager({});
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_TRUE(one_line(again.err)) << again.err;
  EXPECT_NE(again.err.find("already finished"), std::string::npos) << again.err;
  EXPECT_EQ(metrics_text(), finished) << "a finished job appends nothing";

  auto other = averager({"--seed", "77"});
  EXPECT_EQ(other.status, 2) << other.err;
  EXPECT_TRUE(one_line(other.err)) << other.err;
  EXPECT_NE(other.err.find("holds another job"), std::string::npos) << other.err;
  EXPECT_EQ(metrics_text(), finished);

  auto resumed = averager({"--seed", "77", "--resume"});
  EXPECT_EQ(resumed.status, 0) << "--resume of a finished job has nothing to do\n" << resumed.err;
  EXPECT_EQ(metrics_text(), finished);

  // --fresh starts the new job there; the old checkpoints move aside. It waits for its first worker,
  // so a second averager on the directory meets the lock.
  const pid_t fresh = job_.start("averager-fresh", [&] {
    std::vector<std::string> a{"averager", "--listen", "tcp://127.0.0.1:*", "--seed", "77", "--fresh"};
    auto base = averager_args(6, extra);
    a.insert(a.end(), base.begin(), base.end());
    return a;
  }());
  ASSERT_TRUE(job_.wait_for_log("averager-fresh", "starts at round 0", 60s)) << log("averager-fresh");
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(ckpt) / "replaced-1")) << log("averager-fresh");
  auto second = averager({"--seed", "77"});
  EXPECT_EQ(second.status, 1) << second.err;
  EXPECT_TRUE(one_line(second.err)) << second.err;
  EXPECT_NE(second.err.find("in use by another averager (pid " + std::to_string(fresh) + ")"), std::string::npos)
      << second.err;
  ::kill(fresh, SIGKILL);
  EXPECT_TRUE(wait_exit(fresh, 10s));
}

// A seeded schedule of SIGKILLs of the averager and the workers, each victim restarted at once: every
// run ends with the job done, one metrics line per round and one done line, nothing counted twice.
// PRSGD_RECOVERY_SEEDS=N runs N seeds instead of 3 (ops/test.sh --full runs 8, the ASan `ci` test preset 1).
TEST_F(RecoveryTest, SeededKillScheduleLeavesOneLinePerRoundAndOneDone) {
  const char* env = std::getenv("PRSGD_RECOVERY_SEEDS");
  const int seeds = env != nullptr && std::atoi(env) > 0 ? std::atoi(env) : 3;
  constexpr int planned = 24;
  for (int seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " (PRSGD_RECOVERY_SEEDS=" + std::to_string(seeds) + ")");
    std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
    const std::string tag = "s" + std::to_string(seed);
    metrics_ = job_.path("metrics-" + tag + ".jsonl");
    const std::vector<std::string> extra{"--min-workers",      "2", "--checkpoint-dir", job_.path("ckpt-" + tag),
                                         "--checkpoint-every", "3"};
    int restarts = 0;
    auto first = job_.start_averager(averager_args(planned, extra), "averager-" + tag);
    ASSERT_TRUE(first) << log("averager-" + tag);
    pid_t avg = first->pid;
    std::map<int, pid_t> workers{{0, start_worker(0)}, {1, start_worker(1)}};
    int averager_kills = 0;
    int resumed_restarts = 0;
    std::vector<std::string> averager_logs{"averager-" + tag};
    // On the way out of this seed (an ASSERT included), a new failure prints the files behind it.
    const bool failed_before = HasFailure();
    struct at_exit {
      std::function<void()> run;
      ~at_exit() { run(); }
    } const dump{[&] {
      if (HasFailure() && !failed_before) {
        dump_for_failure(averager_logs);
      }
    }};
    double target = 0;
    for (int kill = 0; kill < 4; ++kill) {
      target += static_cast<double>(std::uniform_int_distribution<int>(2, 5)(rng));
      if (target > planned - 5) {
        break;
      }
      ASSERT_TRUE(wait_line([&](const line& l) { return round_line(l) && l.get("round") >= target; }, 90s))
          << "round " << target << " never closed\n"
          << log("averager-" + tag);
      // Anywhere in the next round: just after a line, a checkpoint, or in the middle of training.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 250)(rng)));
      const int victim = std::uniform_int_distribution<int>(-1, 1)(rng);  // -1: the averager
      if (victim < 0) {
        // A checkpoint on disk before the kill must be resumed from (checkpoints are renamed into place
        // whole, and a new one replaces an old one only once it is complete).
        const bool had_checkpoint = has_checkpoint(job_.path("ckpt-" + tag));
        ::kill(avg, SIGKILL);
        ASSERT_TRUE(wait_exit(avg, 10s));
        ++averager_kills;
        const std::string name = "averager-" + tag + "-" + std::to_string(++restarts);
        auto again = job_.start_averager(averager_args(planned, extra), name, job_.averager_endpoint());
        ASSERT_TRUE(again) << log(name);
        avg = again->pid;
        // Until the new incarnation has rewritten the metrics file, the lines its predecessor wrote past the
        // checkpoint are still there and could satisfy the next wait: wait for it to say where it starts.
        ASSERT_TRUE(test::wait_until(
            [&] {
              const auto text = log(name);
              return text.find("resumed from checkpoint at round") != std::string::npos ||
                     text.find("starts at round") != std::string::npos;
            },
            60s))
            << log(name);
        averager_logs.push_back(name);
        if (log(name).find("resumed from checkpoint at round") != std::string::npos) {
          ++resumed_restarts;
        } else {
          // Only a kill before the first checkpoint may start the job again from round 0.
          EXPECT_FALSE(had_checkpoint) << name << " started afresh after round " << target
                                       << " although a checkpoint was on disk\n"
                                       << log(name);
        }
      } else {
        ::kill(workers[victim], SIGKILL);
        ASSERT_TRUE(wait_exit(workers[victim], 10s));
        workers[victim] = start_worker(victim);
      }
    }
    auto status = wait_exit(avg, 180s);
    ASSERT_TRUE(status) << log("averager-" + tag);
    EXPECT_EQ(*status, 0);
    for (const auto& [id, pid] : workers) {
      EXPECT_EQ(wait_exit(pid, 20s), 0) << "worker " << id << "\n" << log("worker-" + std::to_string(id));
    }
    EXPECT_EQ(expect_one_line_per_round(planned), resumed_restarts) << "one resumed line per resumed restart";
    std::printf("seed %d: %d averager kill(s), %d resumed, %zu lines\n", seed, averager_kills, resumed_restarts,
                lines().size());
  }
}

// Heterogeneous workers: one is slowed by 30 ms per step. Time-balanced intervals (from measured speeds)
// must give it shorter intervals than the fast ones. How much idle time at the barrier that saves is a speed
// figure, measured side by side by bench/actors/time_balanced_idle.py, not asserted here: on a loaded machine
// the wall-clock idle times of two separate jobs do not compare.
TEST_F(RecoveryTest, TimeBalancedIntervalsGiveTheSlowedWorkerShorterIntervals) {
  const auto m = job_.path("metrics.jsonl");
  const pid_t local = job_.start("local", {"local",
                                           "--workers",
                                           "3",
                                           "--slowdown-ms",
                                           "0,0,30",
                                           "--model",
                                           "fmnist-mlp",
                                           "--interval",
                                           "8",
                                           "--batch",
                                           "32",
                                           "--rounds",
                                           "40",
                                           "--interval-policy",
                                           "time-balanced",
                                           "--averaging",
                                           "step-normalised",
                                           "--metrics-jsonl",
                                           m,
                                           "--log-dir",
                                           job_.path("logs"),
                                           "--progress",
                                           "off"});
  ASSERT_EQ(wait_exit(local, 180s), 0) << log("local");
#if defined(__SANITIZE_THREAD__)
  // The job ran above (races end a TSan-instrumented process with a non-zero status). Instrumented steps
  // take ~200 ms on 2 cores, so the 30 ms slowdown the speeds rest on is lost in the noise.
  GTEST_SKIP() << "interval comparison skipped under ThreadSanitizer (the slowdown is noise next to a step)";
#endif
  metrics_ = m;
  int unequal_rounds = 0;  // rounds >= 5 whose intervals differ between workers
  for (const auto& l : lines()) {
    if (round_line(l) && l.get("round") >= 5 && l.get("interval_max") > l.get("interval_min")) {
      ++unequal_rounds;  // the first rounds measure the speeds
    }
  }
  EXPECT_GE(unequal_rounds, 30) << "of rounds 5-39, the slowed worker must get a shorter interval in most";
}

}  // namespace
