// SPDX-License-Identifier: Apache-2.0
// `prsgd evaluator` and `--evaluate-on evaluators` as processes: the accuracies an evaluator process reports
// equal the averager's own for the same x̄ (one worker, one seed: the same x̄ in every round); an evaluator
// killed with -9 leaves its rounds' test_acc null, the job goes on and a second evaluator takes over; over
// CURVE the C++ and the Python evaluator (prsgd.Evaluator) score x̄ with their keys, and one with a key the
// averager does not admit is refused when it connects.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "prsgd_job.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

std::string data_dir() { return test::fmnist_dir(); }

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A small job: a softmax regression, x̄ scored after every round.
const std::vector<std::string> job_options = {
    "--model",      "mlp:784-10", "--batch",       "32", "--interval", "4",   "--seed",     "5",
    "--eval-every", "1",          "--min-workers", "1",  "--progress", "off", "--data-dir", data_dir()};
const std::vector<std::string> live = {"--heartbeat-ms", "100", "--heartbeat-timeout-ms", test::scaled_ms(1500ms)};

// One metrics line per round: its number, test_acc and test_loss (nullopt for null or absent).
struct scored_round {
  long round = -1;
  std::optional<double> test_acc;
  std::optional<double> test_loss;
};

std::optional<double> number_after(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  if (at == std::string::npos) {
    return std::nullopt;
  }
  const auto from = at + key.size() + 3;
  if (line.compare(from, 4, "null") == 0) {
    return std::nullopt;
  }
  return std::strtod(line.c_str() + from, nullptr);
}

std::vector<scored_round> rounds_of(const std::string& metrics) {
  std::vector<scored_round> out;
  for (const auto& line : test::lines_of(metrics)) {
    if (line.find("\"event\"") != std::string::npos || line.find("\"round\":") == std::string::npos) {
      continue;  // the done line and operator events
    }
    out.push_back({static_cast<long>(*number_after(line, "round")), number_after(line, "test_acc"),
                   number_after(line, "test_loss")});
  }
  return out;
}

// Runs the job with one worker; with `evaluator`, an evaluator process that said hello before the worker
// starts (so every round's request finds it). Returns the metrics lines.
std::vector<scored_round> run_job(test::prsgd_job& job, bool evaluator) {
  auto args = with(with(job_options, live), {"--rounds", "6", "--metrics-jsonl", job.path("m.jsonl")});
  if (evaluator) {
    args = with(args, {"--evaluate-on", "evaluators"});
  }
  auto averager = job.start_averager(args);
  EXPECT_TRUE(averager) << job.log("averager");
  if (!averager) {
    return {};
  }
  pid_t e = -1;
  if (evaluator) {
    e = job.start("evaluator", with({"evaluator", "--averager", averager->endpoint, "--data-dir", data_dir()}, live));
    EXPECT_TRUE(job.wait_for_log("averager", "evaluator on connection", 120s)) << job.log("evaluator");
  }
  const pid_t worker = job.start_worker(0, with({"--progress", "off", "--data-dir", data_dir()}, live));
  EXPECT_EQ(job.wait_exit(averager->pid, 300s), 0) << job.log("averager");
  EXPECT_EQ(job.wait_exit(worker, 60s), 0) << job.log("worker-0");
  if (evaluator) {
    EXPECT_EQ(job.wait_exit(e, 60s), 0) << job.log("evaluator");  // STOP ends it: status 0
  }
  return rounds_of(test::read_file(job.path("m.jsonl")));
}

TEST(EvaluatorTest, AnEvaluatorProcessReportsTheAccuraciesTheAveragerComputes) {
  test::prsgd_job own{PRSGD_BINARY, "prsgd-eval-own"};
  const auto by_averager = run_job(own, false);
  test::prsgd_job remote{PRSGD_BINARY, "prsgd-eval-remote"};
  const auto by_evaluator = run_job(remote, true);

  ASSERT_GE(by_averager.size(), 6U) << test::read_file(own.path("m.jsonl"));
  ASSERT_EQ(by_evaluator.size(), by_averager.size()) << test::read_file(remote.path("m.jsonl"));
  for (std::size_t i = 0; i < by_averager.size(); ++i) {
    ASSERT_TRUE(by_averager[i].test_acc) << "round " << by_averager[i].round;
    ASSERT_TRUE(by_evaluator[i].test_acc) << "round " << by_evaluator[i].round << "\n" << remote.log("averager");
    EXPECT_EQ(by_averager[i].round, by_evaluator[i].round);
    EXPECT_NEAR(*by_averager[i].test_acc, *by_evaluator[i].test_acc, 1e-6) << "round " << by_averager[i].round;
    // The mean test cross-entropy travels in EVALUATION too, and is the one the averager computes itself.
    ASSERT_TRUE(by_averager[i].test_loss) << "round " << by_averager[i].round;
    ASSERT_TRUE(by_evaluator[i].test_loss) << "round " << by_evaluator[i].round;
    EXPECT_TRUE(std::isfinite(*by_evaluator[i].test_loss) && *by_evaluator[i].test_loss > 0)
        << *by_evaluator[i].test_loss;
    EXPECT_NEAR(*by_averager[i].test_loss, *by_evaluator[i].test_loss, 1e-5) << "round " << by_averager[i].round;
  }
  const auto done_line = [](const std::string& metrics) {
    for (const auto& line : test::lines_of(metrics)) {
      if (line.find("\"event\":\"done\"") != std::string::npos) {
        return line;
      }
    }
    return std::string{};
  };
  const auto own_done = number_after(done_line(test::read_file(own.path("m.jsonl"))), "test_loss");
  const auto remote_done = number_after(done_line(test::read_file(remote.path("m.jsonl"))), "test_loss");
  ASSERT_TRUE(own_done && remote_done) << test::read_file(remote.path("m.jsonl"));
  EXPECT_NEAR(*own_done, *remote_done, 1e-5);
  EXPECT_NE(remote.log("evaluator").find("job finished after"), std::string::npos) << remote.log("evaluator");
}

TEST(EvaluatorTest, AKilledEvaluatorLeavesTestAccNullAndASecondTakesOver) {
  test::prsgd_job job{PRSGD_BINARY, "prsgd-eval-kill"};
  auto averager = job.start_averager(with(with(job_options, live), {"--rounds", "100000", "--evaluate-on", "evaluators",
                                                                    "--metrics-jsonl", job.path("m.jsonl")}));
  ASSERT_TRUE(averager) << job.log("averager");
  const auto evaluator_args = with({"evaluator", "--averager", averager->endpoint, "--data-dir", data_dir()}, live);
  const pid_t first = job.start("evaluator-1", evaluator_args);
  ASSERT_TRUE(job.wait_for_log("averager", "evaluator on connection", 120s)) << job.log("evaluator-1");
  const pid_t worker =
      job.start_worker(0, with({"--progress", "off", "--data-dir", data_dir(), "--slowdown-ms", "5"}, live));
  ASSERT_TRUE(job.wait_for_log("evaluator-1", "test accuracy", 120s)) << job.log("evaluator-1") << job.log("averager");
  ::kill(first, SIGKILL);
  EXPECT_EQ(job.wait_exit(first, 30s), 128 + SIGKILL);
  // The averager notices (connection down or silence) and the rounds go on without an evaluator.
  ASSERT_TRUE(job.wait_for_log("averager", "no evaluator is connected", 120s)) << job.log("averager");

  const pid_t second = job.start("evaluator-2", evaluator_args);
  ASSERT_TRUE(job.wait_for_log("evaluator-2", "test accuracy", 120s)) << job.log("evaluator-2") << job.log("averager");
  ::kill(averager->pid, SIGTERM);  // without --checkpoint-dir: ends the job (STOP to everyone), status 3
  EXPECT_EQ(job.wait_exit(averager->pid, 120s), 3) << job.log("averager");
  EXPECT_EQ(job.wait_exit(second, 60s), 0) << job.log("evaluator-2");
  EXPECT_EQ(job.wait_exit(worker, 60s), 0) << job.log("worker-0");

  // Scored rounds, then rounds without a score (the killed evaluator's and those with none), then scored again.
  const auto rounds = rounds_of(test::read_file(job.path("m.jsonl")));
  std::size_t i = 0;
  while (i < rounds.size() && !rounds[i].test_acc) {
    ++i;
  }
  const std::size_t first_scored = i;
  while (i < rounds.size() && rounds[i].test_acc) {
    ++i;
  }
  const std::size_t first_null = i;
  while (i < rounds.size() && !rounds[i].test_acc) {
    ++i;
  }
  EXPECT_LT(first_scored, rounds.size());
  EXPECT_LT(first_null, rounds.size());
  EXPECT_LT(i, rounds.size()) << "no round scored by the second evaluator";
  for (const auto& r : rounds) {
    if (r.test_acc) {
      EXPECT_GE(*r.test_acc, 0.0);
      EXPECT_LE(*r.test_acc, 1.0);
    }
  }
}

TEST(EvaluatorTest, OverCurveTheCppAndThePythonEvaluatorScoreAndAStrangerIsRefused) {
  if (test::run({"/usr/bin/python3", "-c", "import zmq, msgpack, numpy"}, {}).status != 0) {
    GTEST_SKIP() << "python3-zmq, python3-msgpack or python3-numpy is not installed (ops/install-deps.sh)";
  }
  test::prsgd_job job{PRSGD_BINARY, "prsgd-eval-curve"};
  for (const char* name : {"server", "member", "stranger"}) {
    auto k = job.run({"keygen", "--out-dir", job.path("keys"), "--name", name}, 30s);
    ASSERT_EQ(k.status, 0) << k.err;
  }
  const auto key = [&](const std::string& f) { return job.path("keys/" + f); };
  auto averager = job.start_averager(with(
      with(job_options, live), {"--rounds", "100000", "--evaluate-on", "evaluators", "--metrics-jsonl",
                                job.path("m.jsonl"), "--curve-public-key", key("server.public"), "--curve-secret-key",
                                key("server.secret"), "--curve-allow", key("member.public")}));
  ASSERT_TRUE(averager) << job.log("averager");
  const auto as = [&](const std::string& who) {
    return std::vector<std::string>{"--curve-public-key", key(who + ".public"), "--curve-secret-key",
                                    key(who + ".secret"), "--curve-server-key", key("server.public")};
  };
  const pid_t worker = job.start_worker(
      0, with(with({"--progress", "off", "--data-dir", data_dir(), "--slowdown-ms", "5"}, live), as("member")));

  // The C++ evaluator with the member key scores x̄; SIGTERM ends it with status 3.
  const pid_t cpp = job.start(
      "evaluator-cpp",
      with(with({"evaluator", "--averager", averager->endpoint, "--data-dir", data_dir()}, live), as("member")));
  ASSERT_TRUE(job.wait_for_log("evaluator-cpp", "test accuracy", 120s))
      << job.log("evaluator-cpp") << job.log("averager");
  ::kill(cpp, SIGTERM);
  EXPECT_EQ(job.wait_exit(cpp, 30s), 3) << job.log("evaluator-cpp");

  // The Python evaluator with the same key scores x̄ with numpy.
  test::spawn_options py;
  py.out = job.path("evaluator-py.log");
  py.env = {"PYTHONPATH=" PRSGD_PYTHON_SRC, "PYTHONDONTWRITEBYTECODE=1"};
  const pid_t python = test::spawn(
      {"/usr/bin/python3", PRSGD_LINEAR_EVALUATOR, averager->endpoint, "mlp:784-10 in=1x28x28 out=10 params=7850",
       data_dir(), key("member.public"), key("member.secret"), key("server.public")},
      py);
  ASSERT_GT(python, 0);
  ASSERT_TRUE(job.wait_for_log("evaluator-py", "test accuracy", 120s))
      << job.log("evaluator-py") << job.log("averager");
  EXPECT_NE(job.log("evaluator-py").find("test loss"), std::string::npos) << job.log("evaluator-py");

  // A C++ evaluator with a key the averager does not admit never gets past the CURVE handshake.
  const pid_t stranger = job.start(
      "evaluator-stranger",
      with(with({"evaluator", "--averager", averager->endpoint, "--data-dir", data_dir()}, live), as("stranger")));
  EXPECT_TRUE(job.wait_for_log("averager", "refused a CURVE client", 60s)) << job.log("averager");
  ::kill(stranger, SIGTERM);
  EXPECT_EQ(job.wait_exit(stranger, 30s), 3) << job.log("evaluator-stranger");
  EXPECT_NE(job.log("evaluator-stranger").find("waiting for the averager"), std::string::npos)
      << job.log("evaluator-stranger");
  EXPECT_EQ(job.log("evaluator-stranger").find("scoring"), std::string::npos) << job.log("evaluator-stranger");

  ::kill(averager->pid, SIGTERM);
  EXPECT_EQ(job.wait_exit(averager->pid, 120s), 3) << job.log("averager");
  EXPECT_EQ(test::wait_exit(python, 60s), 0) << job.log("evaluator-py");  // STOP: the job ended
  EXPECT_EQ(job.wait_exit(worker, 60s), 0) << job.log("worker-0");
  const auto rounds = rounds_of(test::read_file(job.path("m.jsonl")));
  std::size_t scored = 0;
  for (const auto& r : rounds) {
    scored += r.test_acc ? 1 : 0;
    // Both evaluators send the loss: a scored round has it, finite and positive.
    if (r.test_acc) {
      ASSERT_TRUE(r.test_loss) << "round " << r.round;
      EXPECT_TRUE(std::isfinite(*r.test_loss) && *r.test_loss > 0) << "round " << r.round << ": " << *r.test_loss;
    }
  }
  EXPECT_GE(scored, 2U);
}

}  // namespace
