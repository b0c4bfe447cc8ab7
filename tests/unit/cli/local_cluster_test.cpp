// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "prsgd/cli/launcher.hpp"

namespace {

using namespace prsgd::cli;

// Returns the value after `flag` in `argv`, or "" when absent.
std::string arg(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return (it == argv.end() || std::next(it) == argv.end()) ? std::string{} : *std::next(it);
}

bool has(const std::vector<std::string>& argv, const std::string& flag) {
  return std::find(argv.begin(), argv.end(), flag) != argv.end();
}

// With the job's key pair every child runs with CURVE: servers admit only the job key, clients use it as the
// server key.
TEST(LocalClusterTest, GivesEveryChildTheJobKeys) {
  local_options o;
  o.workers = 2;
  o.with_head = true;
  const key_file_paths keys{"/run/job.public", "/run/job.secret"};
  const auto kids = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"}, "", keys);
  ASSERT_EQ(kids.size(), 4u);
  for (const auto& k : kids) {
    EXPECT_EQ(arg(k.argv, "--curve-public-key"), keys.public_path) << k.name;
    EXPECT_EQ(arg(k.argv, "--curve-secret-key"), keys.secret_path) << k.name;
    const bool serves = k.name == "head" || k.name == "averager";
    EXPECT_EQ(arg(k.argv, serves ? "--curve-allow" : "--curve-server-key"), keys.public_path) << k.name;
    EXPECT_FALSE(has(k.argv, serves ? "--curve-server-key" : "--curve-allow")) << k.name;
  }
  const auto plain = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"}, "");
  for (const auto& k : plain) {
    EXPECT_FALSE(has(k.argv, "--curve-public-key")) << k.name;
  }
}

// The dashboard and operator options go to the averager only; an operator key is also admitted over CURVE, and
// with --http-bind the URL goes to LOG_DIR/averager.url unless --http-url-file says where.
TEST(LocalClusterTest, GivesTheAveragerTheDashboardAndTheOperators) {
  local_options o;
  o.workers = 1;
  o.log_dir = "/run/logs";
  o.operations.http_bind = "127.0.0.1:0";
  o.operations.http_token_file = "/run/token";
  o.operations.operator_keys = {"/run/op.public", "/run/other.public"};
  o.output.metrics_bind = "127.0.0.1:0";
  const key_file_paths keys{"/run/job.public", "/run/job.secret"};
  const auto kids = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", ""}, "", keys);
  ASSERT_EQ(kids.size(), 2u);
  const auto& avg = kids[0].argv;
  EXPECT_EQ(arg(avg, "--http-bind"), "127.0.0.1:0");
  EXPECT_EQ(arg(avg, "--http-token-file"), "/run/token");
  EXPECT_EQ(arg(avg, "--http-url-file"), "/run/logs/averager.url");
  EXPECT_EQ(arg(avg, "--metrics-bind"), "127.0.0.1:0");
  std::vector<std::string> operators;
  std::vector<std::string> allowed;
  for (std::size_t i = 0; i + 1 < avg.size(); ++i) {
    if (avg[i] == "--operator-key") {
      operators.push_back(avg[i + 1]);
    } else if (avg[i] == "--curve-allow") {
      allowed.push_back(avg[i + 1]);
    }
  }
  EXPECT_EQ(operators, (std::vector<std::string>{"/run/op.public", "/run/other.public"}));
  EXPECT_EQ(allowed, (std::vector<std::string>{"/run/job.public", "/run/op.public", "/run/other.public"}));
  for (const char* flag : {"--http-bind", "--operator-key", "--http-token-file", "--http-url-file"}) {
    EXPECT_FALSE(has(kids[1].argv, flag)) << flag;
  }

  o.operations.http_url_file = "/srv/url";
  EXPECT_EQ(arg(build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", ""}, "", keys)[0].argv, "--http-url-file"),
            "/srv/url");
  o.operations = {};
  const auto quiet = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", ""}, "", keys)[0].argv;
  EXPECT_FALSE(has(quiet, "--http-bind"));
  EXPECT_FALSE(has(quiet, "--http-url-file"));
}

TEST(LocalClusterTest, BuildsAveragerThenWorkersWithDerivedArguments) {
  local_options o;
  o.workers = 3;
  o.model.model = "fmnist-cnn";
  o.model.lr = 0.05;
  o.schedule.interval = 16;
  o.schedule.epochs = 2;
  o.slowdown_ms = {0, 10, 20};
  o.output.log_level = "debug";
  const auto kids = build_local_cluster(o, "/opt/prsgd", {"tcp://127.0.0.1:5555", ""}, "/tmp/m.jsonl");
  ASSERT_EQ(kids.size(), 4u);

  const auto& avg = kids[0];
  EXPECT_EQ(avg.name, "averager");
  EXPECT_EQ(avg.role, child_role::critical);
  EXPECT_EQ(avg.argv[0], "/opt/prsgd");
  EXPECT_EQ(avg.argv[1], "averager");
  EXPECT_EQ(arg(avg.argv, "--listen"), "tcp://127.0.0.1:5555");
  EXPECT_EQ(arg(avg.argv, "--model"), "fmnist-cnn");
  EXPECT_EQ(arg(avg.argv, "--lr"), "0.05");
  EXPECT_EQ(arg(avg.argv, "--interval"), "16");
  EXPECT_EQ(arg(avg.argv, "--epochs"), "2");
  EXPECT_EQ(arg(avg.argv, "--metrics-jsonl"), "/tmp/m.jsonl");
  EXPECT_EQ(arg(avg.argv, "--log-level"), "debug");
  EXPECT_FALSE(has(avg.argv, "--head"));
  EXPECT_EQ(arg(avg.argv, "--endpoint-file"), avg.endpoint_file);
  EXPECT_EQ(avg.endpoint_file, (std::filesystem::absolute("prsgd-logs") / "averager.endpoint").string());

  for (int i = 0; i < 3; ++i) {
    const auto& w = kids[static_cast<std::size_t>(i) + 1];
    EXPECT_EQ(w.name, "worker-" + std::to_string(i));
    EXPECT_EQ(w.role, child_role::normal);
    EXPECT_EQ(w.argv[1], "worker");
    EXPECT_EQ(arg(w.argv, "--averager"), "tcp://127.0.0.1:5555");
    EXPECT_FALSE(has(w.argv, "--worker-id")) << "the averager assigns ids and shards";
    EXPECT_EQ(arg(w.argv, "--slowdown-ms"), std::to_string(i * 10));
    EXPECT_EQ(arg(w.argv, "--model"), "fmnist-cnn");
    EXPECT_FALSE(has(w.argv, "--interval")) << "workers get their interval from the averager";
    EXPECT_FALSE(has(w.argv, "--metrics-jsonl"));
    EXPECT_TRUE(w.endpoint_file.empty());
  }
}

TEST(LocalClusterTest, EveryDerivedCommandLineParsesBack) {
  local_options o;
  o.workers = 2;
  o.model.non_iid = true;
  o.model.dirichlet_alpha = 0.25;
  o.schedule.interval_policy = "per-worker";
  o.schedule.intervals = {4, 8};
  o.slowdown_ms = {5};
  o.with_head = true;
  const auto kids = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"}, "");
  ASSERT_EQ(kids.size(), 4u);
  EXPECT_EQ(kids[0].name, "head");
  EXPECT_EQ(kids[0].role, child_role::service);
  for (const auto& k : kids) {
    auto parsed = parse_command_line(k.argv);
    ASSERT_TRUE(parsed.has_value()) << k.name << ": " << parsed.error().message();
  }
  auto avg = std::get<averager_options>(*parse_command_line(kids[1].argv));
  EXPECT_EQ(avg.head, "tcp://127.0.0.1:5556");
  EXPECT_EQ(avg.schedule.intervals, (std::vector<int>{4, 8}));
  EXPECT_TRUE(avg.model.non_iid);
  EXPECT_DOUBLE_EQ(avg.model.dirichlet_alpha, 0.25);
  auto w1 = std::get<worker_options>(*parse_command_line(kids[3].argv));
  EXPECT_EQ(w1.averager_address.head, "tcp://127.0.0.1:5556");
  EXPECT_TRUE(w1.averager_address.averager.empty());
  EXPECT_EQ(w1.slowdown_ms, 5);
}

// --evaluators N: N `prsgd evaluator` children that connect like workers, and an averager that hands them
// every evaluation.
TEST(LocalClusterTest, EvaluatorsAreStartedAndTheAveragerEvaluatesOnThem) {
  local_options o;
  o.workers = 1;
  o.evaluators = 2;
  const auto kids = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", ""}, "");
  ASSERT_EQ(kids.size(), 4u);
  auto parsed_avg = parse_command_line(kids[0].argv);
  ASSERT_TRUE(parsed_avg.has_value()) << parsed_avg.error().message();
  ASSERT_TRUE(std::holds_alternative<averager_options>(*parsed_avg)) << kids[0].name;
  EXPECT_EQ(std::get<averager_options>(*parsed_avg).schedule.evaluate_on, "evaluators");
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(kids[i].name, "evaluator-" + std::to_string(i - 2));
    EXPECT_EQ(kids[i].role, child_role::normal);
    auto parsed = parse_command_line(kids[i].argv);
    ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
    ASSERT_TRUE(std::holds_alternative<evaluator_options>(*parsed)) << kids[i].name;
    EXPECT_EQ(std::get<evaluator_options>(*parsed).averager_address.averager, "tcp://127.0.0.1:5555");
  }
  // With the job's keys an evaluator connects like a worker: the job key is its server key.
  const key_file_paths keys{"/run/job.public", "/run/job.secret"};
  const auto curve = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", ""}, "", keys);
  EXPECT_EQ(arg(curve[2].argv, "--curve-server-key"), keys.public_path);
  EXPECT_EQ(arg(curve[2].argv, "--curve-public-key"), keys.public_path);
  o.evaluators = 0;
  const auto plain = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", ""}, "");
  ASSERT_EQ(plain.size(), 2u);
  auto parsed_plain = parse_command_line(plain[0].argv);
  ASSERT_TRUE(parsed_plain.has_value() && std::holds_alternative<averager_options>(*parsed_plain));
  EXPECT_EQ(std::get<averager_options>(*parsed_plain).schedule.evaluate_on, "averager");
}

TEST(LocalClusterTest, SaveModelGoesToTheAveragerOnly) {
  local_options o;
  o.workers = 1;
  o.save.save_model = "/tmp/out/model.safetensors";
  o.save.save_best = true;
  const auto kids = build_local_cluster(o, "prsgd", {"tcp://127.0.0.1:5555", ""}, "");
  ASSERT_EQ(kids.size(), 2u);
  auto avg = std::get<averager_options>(*parse_command_line(kids[0].argv));
  EXPECT_EQ(avg.save.save_model, "/tmp/out/model.safetensors");
  EXPECT_TRUE(avg.save.save_best);
  auto w = parse_command_line(kids[1].argv);
  ASSERT_TRUE(w.has_value());
  EXPECT_FALSE(has(kids[1].argv, "--save-model"));
}

}  // namespace
