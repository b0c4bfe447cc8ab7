// SPDX-License-Identifier: Apache-2.0
// `prsgd status`, `prsgd ctl` and the averager's dashboard (--http-bind) against a live job of real
// processes: one `prsgd averager` and two `prsgd worker`s on ZeroMQ over 127.0.0.1, Fashion-MNIST.
// The dashboard test opens the page in headless Chromium (Debian's `chromium`), waits for the charts to
// have data, saves a screenshot and checks the page's numbers against the metrics file.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "files.hpp"
#include "http_client.hpp"
#include "prsgd_job.hpp"
#include "time_scale.hpp"

namespace {

using namespace std::chrono_literals;
namespace test = prsgd::test;

using response = test::http_response;
using test::http_get;

response http_post(int port, const std::string& path, const std::string& body, const std::string& auth = {}) {
  std::string req =
      "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n";
  if (!auth.empty()) {
    req += "Authorization: " + auth + "\r\n";
  }
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return test::http_exchange(port, req);
}

/// Returns the number after "key": in `json` (first occurrence at or after `from`), or nullopt.
std::optional<double> number_after(const std::string& json, const std::string& key, std::size_t from = 0) {
  const auto at = json.find("\"" + key + "\":", from);
  if (at == std::string::npos) {
    return std::nullopt;
  }
  const char* p = json.c_str() + at + key.size() + 3;
  if (std::string_view{p}.starts_with("null")) {
    return std::nullopt;
  }
  return std::strtod(p, nullptr);
}

std::vector<std::string> round_lines(const std::string& metrics) {
  std::vector<std::string> out;
  for (const auto& l : test::lines_of(metrics)) {
    if (l.rfind(R"({"round":)", 0) == 0) {
      out.push_back(l);
    }
  }
  return out;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

class OperationsTest : public ::testing::Test {
 protected:
  std::vector<std::string> averager_args(std::vector<std::string> extra) const {
    std::vector<std::string> args{"--model",
                                  "fmnist-mlp",
                                  "--rounds",
                                  "2000",
                                  "--interval",
                                  "16",
                                  "--batch",
                                  "32",
                                  "--min-workers",
                                  "2",
                                  "--heartbeat-ms",
                                  "100",
                                  "--heartbeat-timeout-ms",
                                  test::scaled_ms(5000ms),
                                  "--progress",
                                  "off",
                                  "--eval-every",
                                  "8",
                                  "--metrics-jsonl",
                                  job_.path("m.jsonl"),
                                  "--http-bind",
                                  "127.0.0.1:0",
                                  "--http-url-file",
                                  job_.path("url")};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  pid_t start_worker(int id) {
    return job_.start_worker(
        id, {"--model", "fmnist-mlp", "--batch", "32", "--heartbeat-ms", "100", "--heartbeat-timeout-ms",
             test::scaled_ms(5000ms), "--slowdown-ms", "20", "--progress", "off"});
  }

  /// Runs `prsgd <args> --averager EP`.
  test::run_result op(std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--averager", job_.averager_endpoint()});
    return job_.run(args, 60s);
  }

  /// Returns the dashboard's port from the URL the averager wrote.
  int http_port() {
    std::string url;
    EXPECT_TRUE(test::wait_until(
        [&] {
          url = test::read_file(job_.path("url"));
          return !url.empty();
        },
        30s));
    const auto colon = url.rfind(':');
    return std::atoi(url.c_str() + colon + 1);
  }

  bool wait_rounds(std::size_t n) {
    return test::wait_until([&] { return round_lines(test::read_file(job_.path("m.jsonl"))).size() >= n; }, 240s,
                            100ms);
  }

  bool wait_state(const std::string& state) {
    return test::wait_until(
        [&] {
          const auto r = op({"status", "--json"});
          return r.status == 0 && r.out.find("\"state\":\"" + state + "\"") != std::string::npos;
        },
        60s, 200ms);
  }

  test::prsgd_job job_{PRSGD_BINARY, "prsgd-ops"};
};

TEST_F(OperationsTest, StatusAndCtlSteerALiveJob) {
  const std::string token = "0123456789abcdef-token";
  { std::ofstream(job_.path("token")) << token << "\n"; }
  const auto avg = job_.start_averager(
      averager_args({"--checkpoint-dir", job_.path("ckpt"), "--http-token-file", job_.path("token")}));
  ASSERT_TRUE(avg);
  const pid_t w1 = start_worker(1);
  const pid_t w2 = start_worker(2);
  ASSERT_TRUE(wait_rounds(3)) << job_.log("averager");

  // The table: the job, and one row per member with its host.
  auto st = op({"status"});
  ASSERT_EQ(st.status, 0) << st.err;
  EXPECT_NE(st.out.find("job       fmnist-mlp  collecting"), std::string::npos) << st.out;
  EXPECT_NE(st.out.find("ID  HOST"), std::string::npos) << st.out;
  EXPECT_EQ(count(st.out, "127.0.0.1"), 2U) << st.out;
  auto js = op({"status", "--json"});
  ASSERT_EQ(js.status, 0) << js.err;
  EXPECT_EQ(count(js.out, "\"host\":\"127.0.0.1\""), 2U) << js.out;
  EXPECT_NE(js.out.find("\"rounds_total\":2000"), std::string::npos) << js.out;
  // The same JSON over HTTP.
  const int port = http_port();
  auto api = http_get(port, "/api/status");
  EXPECT_EQ(api.status, 200);
  EXPECT_NE(api.body.find("\"model\":\"fmnist-mlp\""), std::string::npos) << api.body;
  auto metrics = http_get(port, "/api/metrics?since=1");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.body.find(R"({"round":0,)"), std::string::npos);
  EXPECT_NE(metrics.body.find(R"({"round":1,)"), std::string::npos) << metrics.body;
  EXPECT_EQ(http_get(port, "/api/metrics?since=x").status, 400);
  EXPECT_EQ(http_get(port, "/nothing").status, 404);

  // Bad input: a one-line error, exit 2; a refused action: exit 1.
  auto bad = op({"ctl", "jump"});
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("unknown action 'jump'"), std::string::npos) << bad.err;
  EXPECT_EQ(op({"ctl", "set-interval"}).status, 2);
  auto refused = op({"ctl", "set-interval", "0"});
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.out.find("refused: the interval must be"), std::string::npos) << refused.out;

  // Pause: the round open now closes, then nothing starts.
  auto pause = op({"ctl", "pause"});
  ASSERT_EQ(pause.status, 0) << pause.err;
  EXPECT_NE(pause.out.find("ok: pauses at the barrier of round"), std::string::npos) << pause.out;
  ASSERT_TRUE(wait_state("paused")) << job_.log("averager");
  const auto round_paused = number_after(op({"status", "--json"}).out, "round");
  ASSERT_TRUE(round_paused);
  auto set = op({"ctl", "set-interval", "8"});
  EXPECT_EQ(set.status, 0) << set.out << set.err;
  // Over HTTP: steering needs the bearer token.
  EXPECT_EQ(http_post(port, "/api/control", "action=set-policy&arg=fixed").status, 401);
  EXPECT_EQ(http_post(port, "/api/control", "action=set-policy&arg=fixed", "Bearer wrong-token-000000").status, 401);
  auto with_token = http_post(port, "/api/control", "action=set-policy&arg=fixed", "Bearer " + token);
  EXPECT_EQ(with_token.status, 200) << with_token.body;
  EXPECT_NE(with_token.body.find("interval policy fixed"), std::string::npos) << with_token.body;
  auto ckpt = op({"ctl", "checkpoint"});
  EXPECT_EQ(ckpt.status, 0) << ckpt.out << ckpt.err;
  EXPECT_EQ(number_after(op({"status", "--json"}).out, "round"), round_paused);  // still paused
  const auto lines_paused = round_lines(test::read_file(job_.path("m.jsonl"))).size();

  auto resume = op({"ctl", "resume"});
  ASSERT_EQ(resume.status, 0) << resume.err;
  EXPECT_NE(resume.out.find("ok: resumed: round"), std::string::npos) << resume.out;
  // The rounds after the pause run I = 8 (their lines may wait behind evaluations of earlier ones).
  EXPECT_TRUE(test::wait_until(
      [&] {
        return test::read_file(job_.path("m.jsonl")).find(R"("interval_min":8,"interval_max":8)") != std::string::npos;
      },
      240s, 100ms))
      << job_.log("averager");
  EXPECT_GE(round_lines(test::read_file(job_.path("m.jsonl"))).size(), lines_paused);

  // Remove the member with the higher id: its worker gets STOP and ends.
  const auto json = op({"status", "--json"}).out;
  const auto second = json.find("\"id\":", json.find("\"members\":[") + 20);
  ASSERT_NE(second, std::string::npos) << json;
  const auto id = static_cast<int>(*number_after(json, "id", second - 1));
  auto removed = op({"ctl", "remove", std::to_string(id)});
  ASSERT_EQ(removed.status, 0) << removed.out << removed.err;
  std::optional<int> exited;
  ASSERT_TRUE(test::wait_until(
      [&] {
        for (pid_t w : {w1, w2}) {
          if (auto s = job_.wait_exit(w, 1ms)) {
            exited = s;
            return true;
          }
        }
        return false;
      },
      60s))
      << "the removed member's worker did not end";
  EXPECT_EQ(*exited, 0);
  auto table = op({"status"});
  EXPECT_NE(table.out.find("removed by an operator"), std::string::npos) << table.out;

  auto stop = op({"ctl", "stop"});
  ASSERT_EQ(stop.status, 0) << stop.err;
  EXPECT_EQ(job_.wait_exit(avg->pid, 240s), 0) << job_.log("averager");

  // Every request is an event line in the metrics file, the refused one too.
  const auto text = test::read_file(job_.path("m.jsonl"));
  for (const char* action : {"pause", "set-interval", "set-policy", "checkpoint", "resume", "remove", "stop"}) {
    EXPECT_NE(text.find(std::string{R"({"event":"control","action":")"} + action + "\""), std::string::npos)
        << action << "\n"
        << text;
  }
  EXPECT_NE(text.find(R"("action":"set-interval","arg":"0","ok":false)"), std::string::npos);
  EXPECT_NE(text.find(R"("by":"http")"), std::string::npos);
  EXPECT_NE(text.find(R"({"event":"done")"), std::string::npos);
}

TEST_F(OperationsTest, ACurveJobTakesStatusFromAnyKeyAndSteeringOnlyFromOperators) {
  // Keys: the averager's, an operator's and a watcher's (allowed to connect, not to steer).
  for (const char* name : {"server", "op", "watch"}) {
    ASSERT_EQ(job_.run({"keygen", "--out-dir", job_.path("keys"), "--name", name}, 30s).status, 0);
  }
  const auto key = [&](const std::string& n) { return job_.path("keys/" + n); };
  const std::vector<std::string> server{"--curve-public-key", key("server.public"), "--curve-secret-key",
                                        key("server.secret")};
  auto args = averager_args({"--operator-key", key("op.public")});
  args.insert(args.end(), server.begin(), server.end());
  const auto avg = job_.start_averager(args);
  ASSERT_TRUE(avg);
  std::vector<std::string> worker{"--model", "fmnist-mlp",         "--batch",           "32", "--progress",
                                  "off",     "--curve-server-key", key("server.public")};
  worker.insert(worker.end(), server.begin(), server.end());
  job_.start_worker(1, worker);
  job_.start_worker(2, worker);
  ASSERT_TRUE(wait_rounds(2)) << job_.log("averager");
  const auto client = [&](const std::string& n) {
    return std::vector<std::string>{"--curve-public-key", key(n + ".public"),   "--curve-secret-key",
                                    key(n + ".secret"),   "--curve-server-key", key("server.public")};
  };
  auto with = [&](std::vector<std::string> a, const std::string& n) {
    const auto c = client(n);
    a.insert(a.end(), c.begin(), c.end());
    return op(a);
  };
  auto st = with({"status"}, "watch");
  EXPECT_EQ(st.status, 0) << st.err;
  EXPECT_NE(st.out.find("fmnist-mlp"), std::string::npos);
  auto denied = with({"ctl", "set-interval", "6"}, "watch");
  EXPECT_EQ(denied.status, 1);
  EXPECT_NE(denied.out.find("refused: not an operator"), std::string::npos) << denied.out;
  auto allowed = with({"ctl", "stop"}, "op");
  EXPECT_EQ(allowed.status, 0) << allowed.out << allowed.err;
  EXPECT_EQ(job_.wait_exit(avg->pid, 240s), 0) << job_.log("averager");
  const auto text = test::read_file(job_.path("m.jsonl"));
  EXPECT_EQ(text.find(R"("action":"set-interval")"), std::string::npos);  // refused before the core: no event
  EXPECT_NE(text.find(R"("action":"stop","arg":"","ok":true)"), std::string::npos) << text;
}

#ifdef PRSGD_TEST_CHROMIUM
TEST_F(OperationsTest, DashboardShowsTheJobInChromium) {
  const auto avg = job_.start_averager(averager_args({}));
  ASSERT_TRUE(avg);
  start_worker(1);
  start_worker(2);
  // Enough rounds for every chart, three of them evaluated; then hold the job still so the page and the
  // metrics file can be compared line by line.
  ASSERT_TRUE(test::wait_until([&] { return count(test::read_file(job_.path("m.jsonl")), R"("test_acc":0.)") >= 3; },
                               240s, 100ms))
      << job_.log("averager");
  ASSERT_EQ(op({"ctl", "pause"}).status, 0);
  ASSERT_TRUE(wait_state("paused"));
  // A round's line waits for its evaluation, so under load the last lines may follow the pause: wait until
  // every round before the paused one has its line, so the page and the file see the same rounds.
  const auto paused = op({"status", "--json"});
  ASSERT_EQ(paused.status, 0);
  const auto open_round = number_after(paused.out, "round");
  ASSERT_TRUE(open_round) << paused.out;
  ASSERT_TRUE(test::wait_until(
      [&] {
        return round_lines(test::read_file(job_.path("m.jsonl"))).size() >= static_cast<std::size_t>(*open_round);
      },
      60s, 100ms))
      << "open round " << *open_round << "\n"
      << job_.log("averager");
  const int port = http_port();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  EXPECT_EQ(http_post(port, "/api/control", "action=stop").status, 403);  // no token: read-only

  const std::string profile = job_.path("chromium-profile");
  const std::vector<std::string> browser{PRSGD_TEST_CHROMIUM,
                                         "--headless",
                                         "--no-sandbox",
                                         "--disable-gpu",
                                         "--disable-dev-shm-usage",
                                         "--hide-scrollbars",
                                         "--user-data-dir=" + profile,
                                         "--virtual-time-budget=6000",
                                         "--window-size=1400,1500"};
  test::spawn_options so;
  so.out = job_.path("dom.html");
  so.err = job_.path("chromium.log");
  auto argv = browser;
  argv.push_back("--dump-dom");
  argv.push_back(url);
  auto dump = test::run(argv, so);
  ASSERT_EQ(dump.status, 0) << dump.err;
  const std::string dom = dump.out;
  EXPECT_NE(dom.find("data-ready=\"yes\""), std::string::npos) << dom.substr(0, 2000);
  for (const char* chart :
       {"acc-round", "acc-wall", "loss-round", "loss-wall", "idle", "speed", "bytes", "consensus", "membership"}) {
    const std::regex points{std::string{"id=\""} + chart + "\"[^>]*data-points=\"([0-9]+)\""};
    std::smatch m;
    ASSERT_TRUE(std::regex_search(dom, m, points)) << chart;
    EXPECT_GT(std::stoi(m[1]), 0) << chart;
  }
  // The page's newest rounds are the metrics file's last lines.
  const auto lines = round_lines(test::read_file(job_.path("m.jsonl")));
  ASSERT_FALSE(lines.empty());
  const std::regex count_re{"id=\"rounds\"[^>]*data-count=\"([0-9]+)\""};
  std::smatch cm;
  ASSERT_TRUE(std::regex_search(dom, cm, count_re));
  EXPECT_EQ(static_cast<std::size_t>(std::stoi(cm[1])), lines.size());
  std::size_t checked = 0;
  for (std::size_t k = lines.size() > 5 ? lines.size() - 5 : 0; k < lines.size(); ++k) {
    const auto round = static_cast<int>(*number_after(lines[k], "round"));
    const auto row = dom.find("data-round=\"" + std::to_string(round) + "\"");
    ASSERT_NE(row, std::string::npos) << "round " << round;
    const auto cell = [&](const std::string& field) {
      const auto at = dom.find("data-field=\"" + field + "\">", row);
      return dom.substr(at + field.size() + 14, dom.find('<', at + field.size() + 14) - (at + field.size() + 14));
    };
    char expected[32];
    std::snprintf(expected, sizeof expected, "%.4f", *number_after(lines[k], "train_loss"));
    EXPECT_EQ(cell("train_loss"), expected) << "round " << round;
    if (auto acc = number_after(lines[k], "test_acc")) {
      std::snprintf(expected, sizeof expected, "%.4f", *acc);
      EXPECT_EQ(cell("test_acc"), expected) << "round " << round;
    } else {
      EXPECT_EQ(cell("test_acc"), "-") << "round " << round;
    }
    EXPECT_EQ(cell("members"), std::to_string(static_cast<int>(*number_after(lines[k], "members"))));
    ++checked;
  }
  EXPECT_GT(checked, 0U);
  EXPECT_EQ(count(dom, "data-member=\""), 2U);

  argv = browser;
  argv.push_back("--screenshot=" + job_.path("dashboard.png"));
  argv.push_back(url);
  so.out = job_.path("screenshot.log");
  ASSERT_EQ(test::run(argv, so).status, 0);
  const auto png = test::read_file(job_.path("dashboard.png"));
  ASSERT_GT(png.size(), 10000U);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  if (const char* keep = std::getenv("PRSGD_DASHBOARD_SCREENSHOT")) {
    std::filesystem::copy_file(job_.path("dashboard.png"), keep, std::filesystem::copy_options::overwrite_existing);
  }
  ASSERT_EQ(op({"ctl", "stop"}).status, 0);
  EXPECT_EQ(job_.wait_exit(avg->pid, 240s), 0) << job_.log("averager");
}
#endif

}  // namespace

// `prsgd local` passes the dashboard and operator options to its averager: the dashboard serves /api/status
// while the job runs (the URL in LOG_DIR/averager.url, port chosen by the system), a key the averager was not
// told about cannot steer, and `prsgd ctl` with the operator's key stops the job, which then ends with 0.
TEST(LocalOperationsTest, LocalJobServesTheDashboardAndStopsOnItsOperatorsCtl) {
  test::prsgd_job job{PRSGD_BINARY, "prsgd-local-ops"};
  for (const char* name : {"op", "stranger"}) {
    ASSERT_EQ(job.run({"keygen", "--out-dir", job.path("keys"), "--name", name}, 30s).status, 0);
  }
  const std::string logs = job.path("logs");
  const pid_t local = job.start("local", {"local",
                                          "--workers",
                                          "2",
                                          "--model",
                                          "fmnist-mlp",
                                          "--rounds",
                                          "5000",
                                          "--interval",
                                          "16",
                                          "--batch",
                                          "32",
                                          "--slowdown-ms",
                                          "5",
                                          "--progress",
                                          "off",
                                          "--log-dir",
                                          logs,
                                          "--http-bind",
                                          "127.0.0.1:0",
                                          "--operator-key",
                                          job.path("keys/op.public")});
  std::string url;
  ASSERT_TRUE(test::wait_until(
      [&] {
        url = test::read_file(logs + "/averager.url");
        return !url.empty() && url.back() == '\n';
      },
      60s))
      << job.log("local");
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0U) << url;
  const int port = std::atoi(url.c_str() + url.rfind(':') + 1);
  ASSERT_GT(port, 0) << url;
  // Rounds run, and the dashboard's API shows the job.
  ASSERT_TRUE(
      test::wait_until([&] { return round_lines(test::read_file(logs + "/metrics.jsonl")).size() >= 2; }, 240s, 100ms))
      << job.log("local");
  const auto api = http_get(port, "/api/status");
  EXPECT_EQ(api.status, 200);
  EXPECT_NE(api.body.find("\"model\":\"fmnist-mlp\""), std::string::npos) << api.body;
  EXPECT_NE(api.body.find("\"rounds_total\":5000"), std::string::npos) << api.body;
  EXPECT_TRUE(job.wait_for_log("local", "dashboard on " + url.substr(0, url.size() - 1), 30s)) << job.log("local");

  const std::string endpoint = test::read_file(logs + "/averager.endpoint");
  ASSERT_FALSE(endpoint.empty());
  const auto ctl = [&](const std::string& key, std::chrono::milliseconds timeout_ms) {
    return job.run(
        {"ctl", "--averager", endpoint.substr(0, endpoint.find('\n')), "--curve-server-key", logs + "/keys/job.public",
         "--curve-public-key", job.path("keys/" + key + ".public"), "--curve-secret-key",
         job.path("keys/" + key + ".secret"), "--timeout-ms", std::to_string(timeout_ms.count()), "stop"},
        60s);
  };
  // A key the averager does not admit gets no answer: the job goes on.
  const auto stranger = ctl("stranger", 2000ms);
  EXPECT_NE(stranger.status, 0) << stranger.out << stranger.err;
  EXPECT_EQ(job.wait_exit(local, 0ms), std::nullopt) << job.log("local");
  // The operator stops it.
  const auto stop = ctl("op", 30000ms);
  ASSERT_EQ(stop.status, 0) << stop.out << stop.err;
  EXPECT_NE(stop.out.find("ok"), std::string::npos) << stop.out;
  EXPECT_EQ(job.wait_exit(local, 240s), 0) << job.log("local");
  const auto metrics = test::read_file(logs + "/metrics.jsonl");
  EXPECT_NE(metrics.find(R"("action":"stop","arg":"","ok":true)"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(R"({"event":"done")"), std::string::npos) << metrics;
  EXPECT_LT(round_lines(metrics).size(), 5000U);
}
