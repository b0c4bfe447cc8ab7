// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "prsgd/common/expected.hpp"

/// Option structs and parsing for the `prsgd` command (head, averager, worker, local, keygen).
///
/// Every option can be given on the command line or in a YAML file passed with `--config FILE`
/// (keys are the long option names without the leading dashes; `_` may stand for `-`). Command-line
/// flags override the file. Parsing never exits the process and never throws: it returns either a
/// command to run, a help/version text to print, or an error whose context is one line.
namespace prsgd::cli {

/// Holds what every role prints and loads: logging, metrics, plugins.
struct output_options {
  /// YAML config file the other values were merged from ("" = none).
  std::string config_file;
  /// trace | debug | info | warn | error | off.
  std::string log_level = "info";
  /// Shared libraries to dlopen before anything else (repeatable).
  std::vector<std::string> plugins;
  /// Append one JSON object per round to this file ("" = off).
  std::string metrics_jsonl;
  /// Serve metrics over HTTP on 127.0.0.1:PORT (0 = off).
  int metrics_port = 0;
  /// auto (a single updating line on a terminal, plain lines otherwise) | plain | off.
  std::string progress = "auto";
};

/// Holds the failure-detector settings (heartbeats in both directions).
struct liveness_options {
  /// Interval between heartbeats, in milliseconds.
  int heartbeat_ms = 500;
  /// A peer silent for this long is declared dead, in milliseconds. @pre > heartbeat_ms
  int heartbeat_timeout_ms = 5000;
};

/// Holds CURVE key files; all empty means no encryption/authentication.
struct security_options {
  /// Z85 public key file of this process (from `prsgd keygen`).
  std::string curve_public_key;
  /// Z85 secret key file of this process.
  std::string curve_secret_key;
  /// Z85 public key file of the server this process connects to (worker -> averager/head).
  std::string curve_server_key;
  /// Client public key files allowed to connect (servers only; empty = any client that knows our key).
  std::vector<std::string> curve_allow;
};

/// Holds what defines the learning problem: model, data, batch, optimiser.
struct model_options {
  /// Name in the model registry (built-in or from a plugin), e.g. fmnist-mlp, fmnist-cnn, kws.
  std::string model = "fmnist-mlp";
  /// Data set: auto (kws for kws-* models, else fashion-mnist) | fashion-mnist | kws.
  std::string dataset = "auto";
  /// Directory with the data set files ("" = the data set's default location: Debian's Fashion-MNIST,
  /// or data/kws for the keyword set made by ops/make-kws-data).
  std::string data_dir;
  /// Mini-batch size per worker and step.
  int batch = 64;
  /// SGD step size γ. @pre > 0
  double lr = 0.05;
  /// SGD momentum. @pre in [0, 1)
  double momentum = 0.9;
  /// What a restart does to the local momentum buffer: keep | reset.
  std::string momentum_on_restart = "keep";
  /// Seed for initialisation, shuffling and sharding.
  std::uint64_t seed = 1;
  /// Shard the training set non-IID (Dirichlet label skew) instead of IID.
  bool non_iid = false;
  /// Concentration of the Dirichlet label skew; small = more skewed. @pre > 0
  double dirichlet_alpha = 0.5;
};

/// Holds how the averager runs the rounds.
struct schedule_options {
  /// restarted (PR-SGD: I_i local steps, then average models) | minibatch (the paper's baseline:
  /// every round one mini-batch gradient per worker, averaged; I = 1).
  std::string mode = "restarted";
  /// Passes over the training set before the job ends; 0 = use `rounds`. One epoch is
  /// ceil(train_size / (N · batch)) local steps per worker, N = --min-workers (local: --workers).
  int epochs = 1;
  /// Stop after this many rounds (0 = derived from epochs).
  int rounds = 0;
  /// Local SGD steps between averaging rounds, I (the `fixed` policy).
  int interval = 8;
  /// Per-worker intervals I_i by worker id (the `per-worker` policy), e.g. 4,8,16.
  std::vector<int> intervals;
  /// fixed | per-worker | paper (I = ceil(T^1/4 / N^3/4)) | time-balanced.
  std::string interval_policy = "fixed";
  /// auto (step-normalised when intervals differ, else samples) | uniform | samples | step-normalised.
  std::string averaging = "auto";
  /// When the barrier may close before every member submitted: none | fixed | adaptive (median + k·MAD of
  /// past arrival offsets).
  std::string deadline = "none";
  /// The fixed deadline in ms after a round starts (--deadline fixed).
  int deadline_ms = 10000;
  /// k in median + k·MAD (--deadline adaptive). @pre > 0
  double deadline_mad_k = 3.0;
  /// Submissions a deadline needs before it may close the barrier. @pre >= 1
  int quorum = 1;
  /// Step-size schedule sent with RESTART: constant (--lr) | paper (γ = --lr · sqrt(N / T)).
  std::string step_size = "constant";
  /// Linear warm-up of γ over this many rounds (0 = none).
  int warmup_rounds = 0;
  /// Outer optimiser on the averaged delta (DiLoCo): none | sgd | momentum | nesterov.
  std::string outer = "none";
  /// Outer learning rate. @pre > 0
  double outer_lr = 0.7;
  /// Outer momentum. @pre in [0, 1)
  double outer_momentum = 0.9;
  /// Evaluate on the test set every K rounds (0 = only at every epoch end and at the end).
  int eval_every = 0;
  /// Write a checkpoint every K rounds (0 = never). @pre K == 0 or checkpoint_dir set
  int checkpoint_every = 0;
  /// Directory for averager checkpoints; an existing checkpoint there is resumed.
  std::string checkpoint_dir;
  /// Workers that must have joined before round 0 starts; also N in the epoch length (0 = 1, or
  /// --workers for `prsgd local`).
  int min_workers = 0;
};

/// Holds `prsgd head`: the membership/name service other nodes join.
struct head_options {
  output_options output;
  liveness_options liveness;
  /// Refused when set: the node layer the head runs on cannot authenticate its clients yet.
  security_options security;
  /// Endpoint to bind, e.g. tcp://0.0.0.0:7400.
  std::string listen;
  /// Once bound, write the bound endpoint (one line) to this file, atomically ("" = none).
  std::string endpoint_file;
};

/// Holds `prsgd averager`: the restart barrier, averaging and checkpoints.
struct averager_options {
  output_options output;
  liveness_options liveness;
  security_options security;
  model_options model;
  schedule_options schedule;
  /// Endpoint to bind for workers, e.g. tcp://0.0.0.0:7500.
  std::string listen;
  /// Once bound, write the bound endpoint (one line) to this file, atomically ("" = none).
  std::string endpoint_file;
  /// Head endpoint to register with ("" = standalone).
  std::string head;
};

/// Holds `prsgd worker`: local SGD on one data shard.
struct worker_options {
  output_options output;
  liveness_options liveness;
  security_options security;
  model_options model;
  /// Averager endpoint to join, e.g. tcp://10.77.0.1:7500 ("" = look it up through `head`).
  std::string averager;
  /// Head endpoint to find the averager through ("" = use `averager`).
  std::string head;
  /// With `head`: how long to keep looking the averager up before giving up, in milliseconds. @pre >= 1
  int head_timeout_ms = 60000;
  /// This worker's id; also its shard index. -1 = assigned by the averager.
  int worker_id = -1;
  /// Number of data shards (the intended number of workers).
  int num_workers = 1;
  /// Artificial delay per local step, in milliseconds (heterogeneity experiments).
  int slowdown_ms = 0;
};

/// Holds `prsgd local`: a whole cluster of separate processes on this machine.
struct local_options {
  output_options output;
  liveness_options liveness;
  model_options model;
  schedule_options schedule;
  /// Number of worker processes. @pre >= 1
  int workers = 2;
  /// Per-worker artificial step delay in ms: one value for all, or one per worker.
  std::vector<int> slowdown_ms;
  /// Also start a `prsgd head` and let the others find each other through it.
  bool with_head = false;
  /// Directory for the children's log files (created).
  std::string log_dir = "prsgd-logs";
  /// Averager port on 127.0.0.1 (0 = one the system chooses when the averager binds).
  int port = 0;
  /// Seconds the workers get to exit after the averager has exited, before SIGTERM.
  int grace_s = 10;
};

/// Holds `prsgd keygen`: writes a CURVE key pair.
struct keygen_options {
  /// Directory to write into (created).
  std::string out_dir = ".";
  /// Base name: writes NAME.public and NAME.secret.
  std::string name = "prsgd";
  /// Overwrite existing files.
  bool force = false;
};

/// Asks the caller to print `text` to stdout and exit with status 0 (--help, --version, no arguments).
struct help_request {
  std::string text;
};

/// Holds the outcome of a successful parse: what to run.
using command = std::variant<help_request, head_options, averager_options, worker_options, local_options,
                             keygen_options>;

/// Parses `args` (args[0] is the program name) including a `--config` YAML file, then validates.
/// Returns invalid_argument (bad or unknown option, bad value, unknown YAML key) or not_found
/// (missing config/plugin file) with a one-line context.
[[nodiscard]] expected<command> parse_command_line(const std::vector<std::string>& args);

/// Returns the `--help` text of the whole program (the subcommand list).
[[nodiscard]] std::string program_help();

/// Returns invalid_argument unless `endpoint` looks like tcp://HOST:PORT, ipc://PATH or inproc://NAME.
[[nodiscard]] expected<void> validate_endpoint(const std::string& endpoint, const std::string& what);

/// Returns the first rule `o` breaks, e.g. "--lr must be > 0 (got 0)".
[[nodiscard]] expected<void> validate(const output_options& o);
[[nodiscard]] expected<void> validate(const liveness_options& o);
[[nodiscard]] expected<void> validate(const security_options& o);
[[nodiscard]] expected<void> validate(const model_options& o);
[[nodiscard]] expected<void> validate(const schedule_options& o);
[[nodiscard]] expected<void> validate(const head_options& o);
[[nodiscard]] expected<void> validate(const averager_options& o);
[[nodiscard]] expected<void> validate(const worker_options& o);
[[nodiscard]] expected<void> validate(const local_options& o);
[[nodiscard]] expected<void> validate(const keygen_options& o);

}  // namespace prsgd::cli
