// SPDX-License-Identifier: Apache-2.0
// `prsgd averager --metrics-port P` as a real process with two real `prsgd worker` processes (ZeroMQ on
// 127.0.0.1, Fashion-MNIST): http://127.0.0.1:P/metrics, read through a plain TCP socket, serves the
// round counters in Prometheus text while the job runs; a port already taken is a one-line error, exit 1.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "files.hpp"
#include "http_client.hpp"
#include "ports.hpp"
#include "prsgd_job.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

using test::http_get;

/// Parses Prometheus text samples ("name value", "name{label=\"v\"} value"; the key is the text before the
/// value); comments skipped.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in{text};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') {
      continue;
    }
    const auto labels_end = line.find('}');
    const auto sp = line.find(' ', labels_end == std::string::npos ? 0 : labels_end);
    if (sp == std::string::npos) {
      continue;
    }
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

class PrometheusMetricsTest : public ::testing::Test {
 protected:
  std::vector<std::string> averager_args(int rounds) const {
    return {"--metrics-port",
            std::to_string(metrics_port_),
            "--model",
            "fmnist-mlp",
            "--rounds",
            std::to_string(rounds),
            "--interval",
            "4",
            "--batch",
            "32",
            "--min-workers",
            "2",
            "--heartbeat-ms",
            "100",
            "--heartbeat-timeout-ms",
            test::scaled_ms(3000ms),
            "--progress",
            "off",
            "--eval-every",
            "0"};
  }

  pid_t start_worker(int id) {
    return job_.start_worker(
        id, {"--model", "fmnist-mlp", "--batch", "32", "--heartbeat-ms", "100", "--heartbeat-timeout-ms",
             test::scaled_ms(3000ms), "--slowdown-ms", "15", "--progress", "off"});
  }

  /// Scrapes /metrics until `pred` holds on the samples; returns the first scrape that satisfies it.
  template <class Pred>
  std::optional<std::map<std::string, double>> scrape_until(Pred pred, std::chrono::milliseconds timeout) {
    std::optional<std::map<std::string, double>> found;
    test::wait_until(
        [&] {
          const auto r = http_get(metrics_port_, "/metrics");
          if (r.status == 200) {
            auto s = samples(r.body);
            if (pred(s)) {
              found = std::move(s);
              return true;
            }
          }
          return false;
        },
        timeout, 50ms);
    return found;
  }

  std::string log(const std::string& name) const { return job_.log(name); }

  test::prsgd_job job_{PRSGD_BINARY, "prsgd-prometheus"};
  // --metrics-port takes a number, not "any port": a port held in TIME_WAIT is one no other socket gets.
  int metrics_port_ = test::reserved_tcp_port();
};

TEST_F(PrometheusMetricsTest, ScrapesShowRoundsGrowingWithTwoMembersWhileTheJobRuns) {
  ASSERT_GT(metrics_port_, 0);
  const auto started = job_.start_averager(averager_args(400));
  ASSERT_TRUE(started) << log("averager");
  const pid_t avg = started->pid;
  // The endpoint is up before any worker joined: the counters exist and are 0.
  const auto before = scrape_until([](const auto& s) { return s.contains("prsgd_rounds_total"); }, 30s);
  ASSERT_TRUE(before) << "no scrape answered on port " << metrics_port_ << "\n" << log("averager");
  EXPECT_EQ(before->at("prsgd_rounds_total"), 0);
  const auto raw = http_get(metrics_port_, "/metrics");
  EXPECT_NE(raw.body.find("# HELP prsgd_rounds_total "), std::string::npos) << raw.body;
  EXPECT_NE(raw.body.find("# TYPE prsgd_rounds_total counter"), std::string::npos) << raw.body;
  EXPECT_NE(raw.body.find("# TYPE prsgd_members gauge"), std::string::npos) << raw.body;
  // Requests that are not a scrape get an error status and leave the averager running (civetweb's own
  // error page used to overflow its worker stack and kill the process on `curl 127.0.0.1:PORT/`).
  EXPECT_EQ(http_get(metrics_port_, "/").status, 404);
  EXPECT_EQ(http_get(metrics_port_, "/nothing-here").status, 404);
  EXPECT_EQ(test::http_exchange(metrics_port_, "POST /metrics HTTP/1.0\r\nContent-Length: 3\r\n\r\nx=1").status / 100,
            4);
  EXPECT_EQ(http_get(metrics_port_, "/" + std::string(6000, 'a')).status / 100, 4);
  test::http_exchange(metrics_port_, "GARBAGE\r\n\r\n");
  EXPECT_EQ(test::http_exchange(
                metrics_port_, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
                .status,
            200);
  int status = 0;
  ASSERT_EQ(::waitpid(avg, &status, WNOHANG), 0) << "the averager died on a bad request, status " << status;
  EXPECT_EQ(http_get(metrics_port_, "/metrics").status, 200);

  start_worker(0);
  start_worker(1);
  const auto first = scrape_until(
      [](const auto& s) { return s.contains("prsgd_rounds_total") && s.at("prsgd_rounds_total") >= 3; }, 120s);
  ASSERT_TRUE(first) << log("averager");
  EXPECT_EQ(first->at("prsgd_members"), 2);
  // One scrape is one consistent round: both members submitted every round, each 4 steps of 32 samples.
  const double rounds = first->at("prsgd_rounds_total");
  EXPECT_EQ(first->at("prsgd_submissions_total"), 2 * rounds);
  EXPECT_EQ(first->at("prsgd_samples_total"), 2 * rounds * 4 * 32);
  EXPECT_EQ(first->at("prsgd_round"), rounds - 1);
  EXPECT_EQ(first->at("prsgd_rounds_planned"), 400);
  EXPECT_EQ(first->at("prsgd_interval_min"), 4);
  EXPECT_EQ(first->at("prsgd_interval_max"), 4);
  EXPECT_DOUBLE_EQ(first->at("prsgd_step_size"), 0.05);
  EXPECT_GT(first->at("prsgd_bytes_in_total"), 0);
  EXPECT_GT(first->at("prsgd_bytes_out_total"), 0);
  EXPECT_TRUE(first->contains("prsgd_train_loss"));
  EXPECT_GT(first->at("prsgd_consensus_distance"), 0);
  EXPECT_GE(first->at("prsgd_round_seconds"), first->at("prsgd_barrier_wait_seconds"));
  EXPECT_EQ(first->at("prsgd_rejected_total"), 0);

  const auto later = scrape_until([&](const auto& s) { return s.at("prsgd_rounds_total") >= rounds + 3; }, 120s);
  ASSERT_TRUE(later) << log("averager");
  EXPECT_EQ(later->at("prsgd_members"), 2);
  EXPECT_GT(later->at("prsgd_samples_total"), first->at("prsgd_samples_total"));

  // SIGTERM without --checkpoint-dir ends the job: the workers get STOP (and exit 0), the averager exits 3
  // (stopped by a signal).
  ::kill(avg, SIGTERM);
  EXPECT_EQ(job_.wait_exit(avg, 60s), std::optional<int>{3}) << log("averager");
}

// A worker whose key is not on the averager's allow list is refused at connect time; the refusal shows on
// the metrics endpoint as a drop with reason zap_denied (and never as a member).
TEST_F(PrometheusMetricsTest, ARefusedCurveKeyIsCountedAsADrop) {
  ASSERT_GT(metrics_port_, 0);
  for (const char* name : {"server", "worker", "stranger"}) {
    auto k = job_.run({"keygen", "--out-dir", job_.path("keys"), "--name", name}, 30s);
    ASSERT_EQ(k.status, 0) << k.err;
  }
  const auto key = [&](const std::string& f) { return job_.path("keys/" + f); };
  auto args = averager_args(400);
  for (const std::string& a : std::vector<std::string>{"--curve-public-key", key("server.public"), "--curve-secret-key",
                                                       key("server.secret"), "--curve-allow", key("worker.public")}) {
    args.push_back(a);
  }
  const auto started = job_.start_averager(args);
  ASSERT_TRUE(started) << log("averager");
  job_.start_worker(0, {"--model", "fmnist-mlp", "--progress", "off", "--curve-public-key", key("stranger.public"),
                        "--curve-secret-key", key("stranger.secret"), "--curve-server-key", key("server.public")});
  const std::string denied = "prsgd_transport_dropped_total{reason=\"zap_denied\"}";
  const auto seen = scrape_until([&](const auto& s) { return s.contains(denied) && s.at(denied) >= 1; }, 60s);
  ASSERT_TRUE(seen) << log("averager");
  EXPECT_EQ(seen->at("prsgd_rounds_total"), 0);
  EXPECT_TRUE(job_.wait_for_log("averager", "refused a CURVE client", 10s)) << log("averager");
}

// --metrics-bind ADDR:PORT serves the same endpoint on an address the user chose (here every address of the
// host), and every metric ops/grafana/prsgd.json queries is one that endpoint serves.
TEST_F(PrometheusMetricsTest, MetricsBindServesEveryMetricTheGrafanaDashboardQueries) {
  ASSERT_GT(metrics_port_, 0);
  auto args = averager_args(400);
  args[0] = "--metrics-bind";
  args[1] = "0.0.0.0:" + std::to_string(metrics_port_);
  args.back() = "1";  // --eval-every 1: the accuracy gauge exists from the first round on
  const auto started = job_.start_averager(args);
  ASSERT_TRUE(started) << log("averager");
  start_worker(0);
  start_worker(1);
  const auto seen = scrape_until([](const auto& s) { return s.contains("prsgd_test_acc"); }, 120s);
  ASSERT_TRUE(seen) << log("averager");
  const std::string text = http_get(metrics_port_, "/metrics").body;

  const std::string dashboard = test::read_file(std::string{PRSGD_SOURCE_DIR} + "/ops/grafana/prsgd.json");
  ASSERT_FALSE(dashboard.empty());
  std::set<std::string> queried;
  const std::regex expr{R"re("expr": "([^"\\]|\\.)*")re"};
  const std::regex metric{R"(prsgd_[a-z_]+)"};
  for (auto e = std::sregex_iterator(dashboard.begin(), dashboard.end(), expr); e != std::sregex_iterator(); ++e) {
    const std::string one = e->str();
    for (auto m = std::sregex_iterator(one.begin(), one.end(), metric); m != std::sregex_iterator(); ++m) {
      queried.insert(m->str());
    }
  }
  EXPECT_GE(queried.size(), 20u);
  for (const auto& name : queried) {
    EXPECT_NE(text.find("# TYPE " + name + " "), std::string::npos)
        << "the dashboard queries " << name << ", the endpoint does not serve it";
  }
  // The job's end is the first test's subject; the fixture kills these processes.
}

TEST_F(PrometheusMetricsTest, APortAlreadyInUseIsAOneLineErrorAndExitOne) {
  // The test listens on a port the system chose and hands that port to the averager.
  const test::held_tcp_port taken{/*listen=*/true};
  ASSERT_GT(taken.port(), 0);
  metrics_port_ = taken.port();
  auto args = averager_args(3);
  args.insert(args.begin(), {"averager", "--listen", "tcp://127.0.0.1:*"});
  const auto status = job_.wait_exit(job_.start("averager", args), 60s);
  ASSERT_TRUE(status) << log("averager");
  EXPECT_EQ(*status, 1) << log("averager");
  const std::string out = log("averager");
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "not one line:\n" << out;
  EXPECT_EQ(out.rfind("prsgd averager: ", 0), 0u) << out;
  EXPECT_NE(out.find(std::to_string(metrics_port_)), std::string::npos) << out;
}

}  // namespace
