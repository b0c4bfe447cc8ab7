// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/options.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "files.hpp"

namespace {

using namespace prsgd::cli;
using prsgd::errc;

// A YAML file in a fresh temporary directory, removed with the fixture.
class OptionsTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const auto p = (dir_ / name).string();
    std::ofstream{p} << text;
    return p;
  }

  prsgd::test::scratch_dir scratch_{"prsgd-options"};
  std::filesystem::path dir_ = scratch_.path();
};

prsgd::expected<command> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prsgd");
  return parse_command_line(args);
}

template <class T>
T get(const prsgd::expected<command>& c) {
  EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message());
  EXPECT_TRUE(std::holds_alternative<T>(*c));
  return std::get<T>(*c);
}

std::string error_of(const prsgd::expected<command>& c) {
  EXPECT_FALSE(c.has_value());
  if (c) {
    return {};
  }
  EXPECT_EQ(c.error().context.find('\n'), std::string::npos) << "errors must be one line";
  return c.error().context;
}

TEST_F(OptionsTest, LocalContractOptionsParse) {
  auto o = get<local_options>(parse({"local",      "--workers",        "4",  "--model",
                                     "fmnist-cnn", "--interval",       "16", "--epochs",
                                     "3",          "--batch",          "32", "--lr",
                                     "0.1",        "--seed",           "7",  "--metrics-jsonl",
                                     "m.jsonl",    "--checkpoint-dir", "ck", "--checkpoint-every",
                                     "5"}));
  EXPECT_EQ(o.workers, 4);
  EXPECT_EQ(o.model.model, "fmnist-cnn");
  EXPECT_EQ(o.schedule.interval, 16);
  EXPECT_EQ(o.schedule.epochs, 3);
  EXPECT_EQ(o.model.batch, 32);
  EXPECT_DOUBLE_EQ(o.model.lr, 0.1);
  EXPECT_EQ(o.model.seed, 7u);
  EXPECT_EQ(o.output.metrics_jsonl, "m.jsonl");
  EXPECT_EQ(o.schedule.checkpoint_dir, "ck");
  EXPECT_EQ(o.schedule.checkpoint_every, 5);
}

// The averager and `prsgd local` take the same operations options (the launcher passes them on); the token and
// URL files mean nothing without a dashboard.
TEST_F(OptionsTest, LocalAndAveragerTakeTheDashboardAndOperatorOptions) {
  const std::vector<std::string> ops{
      "--http-bind",    "127.0.0.1:0", "--http-token-file", "t", "--operator-key", "a.public",
      "--operator-key", "b.public",    "--http-url-file",   "u"};
  std::vector<std::string> local{"local"};
  local.insert(local.end(), ops.begin(), ops.end());
  const auto l = get<local_options>(parse(local));
  std::vector<std::string> averager{"averager", "--listen", "tcp://127.0.0.1:*"};
  averager.insert(averager.end(), ops.begin(), ops.end());
  const auto a = get<averager_options>(parse(averager));
  EXPECT_EQ(l.operations, a.operations);
  EXPECT_EQ(l.operations.http_bind, "127.0.0.1:0");
  EXPECT_EQ(l.operations.http_token_file, "t");
  EXPECT_EQ(l.operations.http_url_file, "u");
  EXPECT_EQ(l.operations.operator_keys, (std::vector<std::string>{"a.public", "b.public"}));
  // Passed on as absolute paths.
  const auto args = to_arguments(l.operations);
  EXPECT_EQ(args.size(), 10u);
  EXPECT_EQ(args[1], std::filesystem::absolute("a.public").string());
  for (const auto& sub : {std::vector<std::string>{"local"}, {"averager", "--listen", "tcp://127.0.0.1:*"}}) {
    for (const char* flag : {"--http-token-file", "--http-url-file"}) {
      auto no_bind = sub;
      no_bind.insert(no_bind.end(), {flag, "f"});
      EXPECT_NE(error_of(parse(no_bind)).find("need --http-bind"), std::string::npos) << sub[0] << " " << flag;
    }
  }
}

TEST_F(OptionsTest, EvaluatorAndEvaluateOnOptions) {
  const std::string listen = "tcp://127.0.0.1:7500";
  EXPECT_EQ(get<averager_options>(parse({"averager", "--listen", listen})).schedule.evaluate_on, "averager");
  EXPECT_EQ(get<averager_options>(parse({"averager", "--listen", listen, "--evaluate-on", "evaluators"}))
                .schedule.evaluate_on,
            "evaluators");
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--evaluate-on", "gpu"})).find("--evaluate-on"),
            std::string::npos);
  EXPECT_EQ(get<local_options>(parse({"local", "--evaluators", "2"})).evaluators, 2);
  EXPECT_NE(error_of(parse({"local", "--evaluators", "-1"})).find("--evaluators"), std::string::npos);

  const auto e =
      get<evaluator_options>(parse({"evaluator", "--averager", listen, "--data-dir", dir_.string(), "--seed", "4"}));
  EXPECT_EQ(e.averager_address.averager, listen);
  EXPECT_EQ(e.model.data_dir, dir_.string());
  EXPECT_EQ(e.given, (std::vector<std::string>{"--data-dir", "--seed"}));
  EXPECT_NE(error_of(parse({"evaluator"})).find("--averager"), std::string::npos);
  const auto pub = write("e.public", "x\n");
  const auto sec = write("e.secret", "x\n");
  EXPECT_NE(error_of(parse({"evaluator", "--averager", listen, "--curve-public-key", pub, "--curve-secret-key", sec}))
                .find("--curve-server-key"),
            std::string::npos);
}

TEST_F(OptionsTest, BarrierStepSizeAndOuterOptimiserOptions) {
  auto a = get<averager_options>(parse({"averager",    "--listen",  "tcp://127.0.0.1:7500",
                                        "--deadline",  "adaptive",  "--deadline-mad-k",
                                        "2.5",         "--quorum",  "2",
                                        "--step-size", "paper",     "--warmup-rounds",
                                        "5",           "--outer",   "nesterov",
                                        "--outer-lr",  "0.7",       "--outer-momentum",
                                        "0.8",         "--dataset", "kws"}));
  EXPECT_EQ(a.schedule.deadline, "adaptive");
  EXPECT_DOUBLE_EQ(a.schedule.deadline_mad_k, 2.5);
  EXPECT_EQ(a.schedule.quorum, 2);
  EXPECT_EQ(a.schedule.step_size, "paper");
  EXPECT_EQ(a.schedule.warmup_rounds, 5);
  EXPECT_EQ(a.schedule.outer, "nesterov");
  EXPECT_DOUBLE_EQ(a.schedule.outer_momentum, 0.8);
  EXPECT_EQ(a.model.dataset, "kws");
  auto mb = get<averager_options>(parse({"averager", "--listen", "tcp://127.0.0.1:7500", "--mode", "minibatch"}));
  EXPECT_EQ(mb.schedule.mode, "minibatch");
  const std::string listen = "tcp://127.0.0.1:7500";
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--deadline", "soon"})).find("--deadline"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--quorum", "0"})).find("--quorum"), std::string::npos);
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--outer-momentum", "1"})).find("--outer-momentum"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--mode", "async"})).find("--mode"), std::string::npos);
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--mode", "minibatch", "--outer", "nesterov"}))
                .find("--outer applies to --mode restarted"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--dataset", ""})).find("--dataset"), std::string::npos);
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--data-option", "classes"}))
                .find("--data-option must be KEY=VALUE (got 'classes')"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"averager", "--listen", listen, "--data-option", "=3"})).find("--data-option"),
            std::string::npos);
}

// Data set names are checked once the plugins are loaded (a plugin may add one), not while parsing.
TEST_F(OptionsTest, AnyDataSetNameAndDataOptionsParse) {
  auto o = get<local_options>(
      parse({"local", "--dataset", "my-set", "--data-option", "label-column=last", "--data-option", "header=no"}));
  EXPECT_EQ(o.model.dataset, "my-set");
  EXPECT_EQ(o.model.data_options, (std::vector<std::string>{"label-column=last", "header=no"}));
}

TEST_F(OptionsTest, SaveModelAndTheModelTools) {
  auto l = get<local_options>(parse({"local", "--save-model", "m.safetensors", "--save-best"}));
  EXPECT_EQ(l.save.save_model, "m.safetensors");
  EXPECT_TRUE(l.save.save_best);
  EXPECT_NE(error_of(parse({"local", "--save-best"})).find("--save-best needs --save-model"), std::string::npos);
  EXPECT_NE(error_of(parse({"averager", "--listen", "tcp://127.0.0.1:7500", "--save-best"})).find("--save-model"),
            std::string::npos);
  EXPECT_EQ(best_model_path("out/model.safetensors"), "out/model.best.safetensors");
  EXPECT_EQ(best_model_path("model"), "model.best");

  auto e = get<export_options>(parse({"export", "--checkpoint-dir", dir_.string(), "--out", "x.safetensors"}));
  EXPECT_EQ(e.out, "x.safetensors");
  EXPECT_TRUE(e.model.empty());
  EXPECT_NE(error_of(parse({"export", "--out", "x"})).find("--checkpoint-dir"), std::string::npos);
  EXPECT_NE(
      error_of(parse({"export", "--checkpoint-dir", (dir_ / "none").string(), "--out", "x"})).find("not a directory"),
      std::string::npos);

  auto v = get<eval_options>(parse({"eval", "--weights", "w.safetensors", "--json", "--predictions", "p.csv"}));
  EXPECT_TRUE(v.model.model.empty()) << "the model comes from the weights file unless given";
  EXPECT_TRUE(v.json);
  EXPECT_EQ(v.predictions, "p.csv");
  EXPECT_NE(error_of(parse({"eval"})).find("--weights"), std::string::npos);

  auto p = get<predict_options>(
      parse({"predict", "--model", "fmnist-cnn", "--weights", "w", "--top-k", "5", "a.png", "b.npy"}));
  EXPECT_EQ(p.model.model, "fmnist-cnn");
  EXPECT_EQ(p.top_k, 5);
  EXPECT_EQ(p.inputs, (std::vector<std::string>{"a.png", "b.npy"}));
  EXPECT_NE(error_of(parse({"predict", "--weights", "w"})).find("INPUT"), std::string::npos);
  EXPECT_NE(error_of(parse({"predict", "--weights", "w", "--top-k", "0", "a.png"})).find("--top-k"), std::string::npos);
}

TEST_F(OptionsTest, DefaultsAreValid) {
  auto o = get<local_options>(parse({"local"}));
  EXPECT_EQ(o.workers, 2);
  EXPECT_EQ(o.model.model, "fmnist-mlp");
  EXPECT_EQ(o.schedule.averaging, "auto");
  EXPECT_TRUE(validate(local_options{}).has_value());
}

TEST_F(OptionsTest, AveragerAndWorkerParse) {
  auto a = get<averager_options>(parse({"averager", "--listen", "tcp://0.0.0.0:7500", "--insecure", "--averaging",
                                        "step-normalised", "--interval-policy", "per-worker", "--intervals", "4,8,16",
                                        "--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"}));
  EXPECT_EQ(a.listen, "tcp://0.0.0.0:7500");
  EXPECT_EQ(a.schedule.averaging, "step-normalised");
  EXPECT_EQ(a.schedule.intervals, (std::vector<int>{4, 8, 16}));
  EXPECT_EQ(a.liveness.heartbeat_ms, 100);

  auto w = get<worker_options>(parse({"worker", "--averager", "tcp://10.77.0.1:7500", "--insecure", "--slowdown-ms",
                                      "20", "--non-iid", "--dirichlet-alpha", "0.1"}));
  EXPECT_EQ(w.averager_address.averager, "tcp://10.77.0.1:7500");
  EXPECT_EQ(w.slowdown_ms, 20);
  EXPECT_TRUE(w.model.non_iid);
  EXPECT_DOUBLE_EQ(w.model.dirichlet_alpha, 0.1);

  auto via_head = get<worker_options>(parse({"worker", "--head", "tcp://127.0.0.1:7400"}));
  EXPECT_EQ(via_head.averager_address.head, "tcp://127.0.0.1:7400");
  auto h = get<head_options>(parse({"head", "--listen", "tcp://*:7400", "--insecure"}));
  EXPECT_EQ(h.listen, "tcp://*:7400");
}

TEST_F(OptionsTest, RepeatedPluginsAccumulate) {
  const auto a = write("a.so", "x");
  const auto b = write("b.so", "x");
  auto o = get<local_options>(parse({"local", "--plugin", a, "--plugin", b}));
  EXPECT_EQ(o.output.plugins, (std::vector<std::string>{a, b}));
}

TEST_F(OptionsTest, RepeatedScalarTakesLastValue) {
  auto o = get<local_options>(parse({"local", "--workers", "3", "--workers", "5"}));
  EXPECT_EQ(o.workers, 5);
}

TEST_F(OptionsTest, BadValuesAreOneLineErrors) {
  EXPECT_NE(error_of(parse({"local", "--workers", "-2"})).find("--workers must be at least 1"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--workers", "0"})).find("--workers"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--lr", "0"})).find("--lr must be > 0"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--lr", "-0.1"})).find("--lr"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--momentum", "1"})).find("--momentum"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--workers", "abc"})).find("--workers"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--averaging", "median"})).find("--averaging"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--interval-policy", "sometimes"})).find("--interval-policy"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--interval-policy", "per-worker"})).find("--intervals"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--checkpoint-every", "3"})).find("--checkpoint-dir"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--workers", "3", "--slowdown-ms", "1,2"})).find("--slowdown-ms"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--heartbeat-ms", "500", "--heartbeat-timeout-ms", "400"}))
                .find("--heartbeat-timeout-ms"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--epochs", "0"})).find("--rounds"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--log-level", "loud"})).find("--log-level"), std::string::npos);
  EXPECT_EQ(error_of(parse({"local", "--wire-compress", "zstd"})),
            "prsgd local: --wire-compress zstd needs --topology sharded");
  EXPECT_NE(error_of(parse({"local", "--topology", "sharded", "--wire-compress", "lz4"})).find("--wire-compress"),
            std::string::npos);
  EXPECT_EQ(error_of(parse({"local", "--upload-buffer-kib", "32"})),
            "prsgd local: --upload-buffer-kib needs --topology sharded");
  EXPECT_EQ(error_of(parse({"local", "--topology", "sharded", "--upload-buffer-kib", "3"})),
            "prsgd local: --upload-buffer-kib must be 0 (autotuned) or 4 to 65536 (got 3)");
  EXPECT_NE(error_of(parse({"local", "--topology", "sharded", "--upload-buffer-kib", "65537"})).find("65537"),
            std::string::npos);
}

TEST_F(OptionsTest, UnknownOptionAndSubcommandAreErrors) {
  EXPECT_NE(error_of(parse({"local", "--bogus", "1"})).find("--bogus"), std::string::npos);
  EXPECT_NE(error_of(parse({"frobnicate"})).find("unknown subcommand 'frobnicate'"), std::string::npos);
  // An averager-only option is unknown to a worker.
  EXPECT_NE(error_of(parse({"worker", "--averager", "tcp://h:1", "--insecure", "--interval", "4"})).find("--interval"),
            std::string::npos);
}

TEST_F(OptionsTest, RequiredEndpointsAndTheirSyntax) {
  EXPECT_NE(error_of(parse({"averager"})).find("--listen"), std::string::npos);
  EXPECT_NE(error_of(parse({"worker"})).find("--averager"), std::string::npos);
  EXPECT_NE(error_of(parse({"worker", "--averager", "10.0.0.1:7500"})).find("tcp://HOST:PORT"), std::string::npos);
  EXPECT_NE(error_of(parse({"worker", "--averager", "tcp://h:99999"})).find("port"), std::string::npos);
  EXPECT_NE(error_of(parse({"worker", "--averager", "udp://h:1"})).find("tcp://"), std::string::npos);
  EXPECT_NE(
      error_of(parse({"worker", "--averager", "tcp://h:1", "--insecure", "--worker-id", "0"})).find("--worker-id"),
      std::string::npos)
      << "the averager assigns ids and shards";
  EXPECT_TRUE(validate_endpoint("ipc:///tmp/prsgd.sock", "x").has_value());
  EXPECT_TRUE(validate_endpoint("inproc://avg", "x").has_value());
  EXPECT_FALSE(validate_endpoint("tcp://:7", "x").has_value());
}

// Off loopback, ZeroMQ endpoints need CURVE keys or an explicit --insecure; loopback, ipc and inproc do not.
TEST_F(OptionsTest, NonLoopbackEndpointsNeedCurveKeysOrInsecure) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"averager", "--listen", "tcp://0.0.0.0:7500"},
           {"averager", "--listen", "tcp://127.0.0.1:7500", "--head", "tcp://head.example:7400"},
           {"worker", "--averager", "tcp://10.77.0.1:7500"},
           {"worker", "--head", "tcp://[fe80::1]:7400"},
           {"head", "--listen", "tcp://*:7400"}}) {
    const auto e = error_of(parse(args));
    EXPECT_NE(e.find("is not a loopback address"), std::string::npos) << e;
    EXPECT_NE(e.find("--insecure"), std::string::npos) << e;
    auto with_flag = args;
    with_flag.push_back("--insecure");
    EXPECT_TRUE(parse(with_flag).has_value()) << args[0];
  }
  for (const auto* local : {"tcp://127.0.0.1:7500", "tcp://127.1.2.3:7500", "tcp://localhost:7500", "tcp://[::1]:7500",
                            "ipc:///tmp/prsgd.sock", "inproc://avg"}) {
    EXPECT_TRUE(parse({"averager", "--listen", local}).has_value()) << local;
    EXPECT_TRUE(parse({"worker", "--averager", local}).has_value()) << local;
  }
  // CURVE keys make a non-loopback address acceptable.
  const auto pub = write("k.public", "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\n");
  const auto sec = write("k.secret", "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6\n");
  EXPECT_TRUE(parse({"head", "--listen", "tcp://0.0.0.0:7400", "--curve-public-key", pub, "--curve-secret-key", sec})
                  .has_value());
  EXPECT_TRUE(parse({"worker", "--averager", "tcp://10.77.0.1:7500", "--curve-public-key", pub, "--curve-secret-key",
                     sec, "--curve-server-key", pub})
                  .has_value());
}

TEST_F(OptionsTest, MissingFilesAreNotFound) {
  auto c = parse({"local", "--config", (dir_ / "nope.yaml").string()});
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, errc::not_found);
  auto p = parse({"local", "--plugin", (dir_ / "nope.so").string()});
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, errc::not_found);
  auto d = parse({"local", "--data-dir", (dir_ / "nodata").string()});
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, errc::not_found);
}

TEST_F(OptionsTest, YamlConfigSetsEveryKindOfOption) {
  const auto cfg = write("job.yaml",
                         "workers: 3\n"
                         "model: fmnist-cnn\n"
                         "lr: 0.1\n"
                         "non-iid: true\n"
                         "dirichlet_alpha: 0.3\n"  // underscores work too
                         "intervals: [4, 8, 16]\n"
                         "interval-policy: per-worker\n"
                         "slowdown-ms: 0,10,20\n"
                         "log-level: debug\n");
  auto o = get<local_options>(parse({"local", "--config", cfg}));
  EXPECT_EQ(o.workers, 3);
  EXPECT_EQ(o.model.model, "fmnist-cnn");
  EXPECT_DOUBLE_EQ(o.model.lr, 0.1);
  EXPECT_TRUE(o.model.non_iid);
  EXPECT_DOUBLE_EQ(o.model.dirichlet_alpha, 0.3);
  EXPECT_EQ(o.schedule.intervals, (std::vector<int>{4, 8, 16}));
  EXPECT_EQ(o.slowdown_ms, (std::vector<int>{0, 10, 20}));
  EXPECT_EQ(o.output.log_level, "debug");
  EXPECT_EQ(o.output.config_file, cfg);
}

TEST_F(OptionsTest, FlagsOverrideTheConfigFile) {
  const auto cfg = write("job.yaml", "workers: 3\nlr: 0.1\nnon-iid: true\n");
  auto o = get<local_options>(parse({"local", "--config", cfg, "--workers", "5"}));
  EXPECT_EQ(o.workers, 5);
  EXPECT_DOUBLE_EQ(o.model.lr, 0.1);
  // The flag may come before --config as well.
  auto o2 = get<local_options>(parse({"local", "--lr", "0.2", "--config", cfg}));
  EXPECT_DOUBLE_EQ(o2.model.lr, 0.2);
  EXPECT_EQ(o2.workers, 3);
}

TEST_F(OptionsTest, FalseBooleanInConfigStaysFalse) {
  const auto cfg = write("job.yaml", "non-iid: false\n");
  auto o = get<local_options>(parse({"local", "--config", cfg}));
  EXPECT_FALSE(o.model.non_iid);
}

TEST_F(OptionsTest, ConfigErrorsAreOneLineAndNameTheKey) {
  EXPECT_NE(error_of(parse({"local", "--config", write("a.yaml", "workerz: 3\n")})).find("unknown key 'workerz'"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--config", write("b.yaml", "workers: many\n")})).find("workers"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--config", write("c.yaml", "workers: -1\n")})).find("--workers"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--config", write("d.yaml", "- 1\n- 2\n")})).find("mapping"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--config", write("e.yaml", "workers: [1\n")})).find("e.yaml"), std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--config", write("f.yaml", "model: {a: 1}\n")})).find("model"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--config", write("g.yaml", "non-iid: maybe\n")})).find("non-iid"),
            std::string::npos);
  EXPECT_NE(error_of(parse({"local", "--config", write("h.yaml", "config: other.yaml\n")})).find("config"),
            std::string::npos);
  // A key valid for another subcommand is unknown here.
  EXPECT_NE(
      error_of(parse({"worker", "--averager", "tcp://h:1", "--insecure", "--config", write("i.yaml", "epochs: 2\n")}))
          .find("unknown key 'epochs'"),
      std::string::npos);
}

TEST_F(OptionsTest, EmptyConfigFileChangesNothing) {
  auto o = get<local_options>(parse({"local", "--config", write("empty.yaml", "")}));
  EXPECT_EQ(o.workers, 2);
}

TEST_F(OptionsTest, HelpAndVersionAreRequestsNotErrors) {
  auto h = get<help_request>(parse({"--help"}));
  EXPECT_NE(h.text.find("local"), std::string::npos);
  EXPECT_NE(h.text.find("keygen"), std::string::npos);
  auto lh = get<help_request>(parse({"local", "--help"}));
  EXPECT_NE(lh.text.find("--workers"), std::string::npos);
  EXPECT_NE(lh.text.find("--config"), std::string::npos);
  auto none = get<help_request>(parse({}));
  EXPECT_EQ(none.text, program_help());
  auto v = get<help_request>(parse({"--version"}));
  EXPECT_EQ(v.text.rfind("prsgd ", 0), 0u);
  EXPECT_EQ(v.text.back(), '\n');
}

TEST_F(OptionsTest, KeygenOptions) {
  auto k = get<keygen_options>(parse({"keygen", "--out-dir", "keys", "--name", "averager", "--force"}));
  EXPECT_EQ(k.out_dir, "keys");
  EXPECT_EQ(k.name, "averager");
  EXPECT_TRUE(k.force);
  EXPECT_NE(error_of(parse({"keygen", "--name", "a/b"})).find("--name"), std::string::npos);
}

}  // namespace
