// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "prsgd/common/expected.hpp"

/// Option structs and parsing for the `prsgd` command (head, averager, worker, local, keygen, and the
/// model tools export, eval, predict).
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
  /// Serve them on ADDR:PORT instead (an explicit choice to go off loopback; "" = --metrics-port).
  /// @pre not with metrics_port
  std::string metrics_bind;
  /// auto (a single updating line on a terminal, plain lines otherwise) | plain | off.
  std::string progress = "auto";
};

/// Holds the failure-detector settings (heartbeats in both directions).
struct liveness_options {
  /// Interval between heartbeats, in milliseconds.
  int heartbeat_ms = 500;
  /// A peer silent for this long is declared dead, in milliseconds. @pre > heartbeat_ms
  int heartbeat_timeout_ms = 5000;
  /// The slowest rate, in Mbit/s, at which a model is expected to cross a connection: a peer that
  /// announced a model of B bytes is not declared dead before the timeout + B / this rate. @pre > 0
  double slowest_link_mbit = 1.0;

  friend bool operator==(const liveness_options&, const liveness_options&) = default;
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
  /// Allows listening on / connecting to a non-loopback tcp address without CURVE keys.
  bool insecure = false;
};

/// Holds what defines the learning problem: model, data, batch, optimiser.
struct model_options {
  /// Name in the model registry (built-in or from a plugin), e.g. fmnist-mlp, fmnist-cnn, kws-cnn, or a
  /// spec string such as mlp:64-128-10 (algorithms/model_spec.hpp).
  std::string model = "fmnist-mlp";
  /// Data set name in the data set registry: auto (kws for kws-* models, else fashion-mnist) | fashion-mnist |
  /// kws | npy | csv | wav-folder | one a plugin registered (checked once the plugins are loaded).
  std::string dataset = "auto";
  /// Directory with the data set files ("" = the data set's default location: Debian's Fashion-MNIST,
  /// or data/kws for the keyword set made by ops/make-kws-data; npy, csv and wav-folder need one).
  std::string data_dir;
  /// Data-set-specific settings as KEY=VALUE (repeatable), e.g. label-column=last for csv.
  std::vector<std::string> data_options;
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

  friend bool operator==(const model_options&, const model_options&) = default;
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
  /// auto (samples on IID shards; with non_iid, step-normalised when intervals differ) | uniform | samples |
  /// step-normalised.
  std::string averaging = "auto";
  /// How the weighted updates x_i − x̄ are combined: mean | trimmed-mean | median | norm-clip.
  std::string aggregate = "mean";
  /// Weight mass removed from each end of every coordinate by trimmed-mean. @pre in [0, 0.5)
  double trim = 0.25;
  /// Norm bound of norm-clip (0 = the round's median update norm). @pre >= 0
  double clip = 0;
  /// Leave out an update whose norm exceeds k × the round's median update norm (0 = off). @pre 0 or >= 1
  double screen_k = 4;
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
  /// Who scores x̄ on the test set: averager (the averager process itself) | evaluators (`prsgd evaluator`
  /// processes; without one connected a round's test_acc is null). An external model always uses evaluators.
  std::string evaluate_on = "averager";
  /// Write a checkpoint every K rounds (0 = never). @pre K == 0 or checkpoint_dir set
  int checkpoint_every = 0;
  /// Directory for averager checkpoints. Without --resume / --fresh, the newest checkpoint there is
  /// resumed when it belongs to the same job (same job fingerprint), a finished job ends the averager at
  /// once (status 0), and another job's checkpoint is refused (status 2).
  std::string checkpoint_dir;
  /// Resume the newest checkpoint in checkpoint_dir even when its job fingerprint differs (the model
  /// must still match). @pre checkpoint_dir set, not with fresh
  bool resume = false;
  /// Start a new job in checkpoint_dir: its checkpoints are moved to a `replaced-N` subdirectory.
  /// @pre checkpoint_dir set, not with resume
  bool fresh = false;
  /// Workers that must have joined before round 0 starts; also N in the epoch length (0 = 1, or
  /// --workers for `prsgd local`).
  int min_workers = 0;
  /// Data shards, and so the most members training at once (0 = min_workers); a worker beyond it waits.
  int max_workers = 0;
  /// star (the averager averages whole models) | sharded (K shard owner processes average one slice each).
  std::string topology = "star";
  /// Shard owners of a sharded job: K (local: 0 = one per worker).
  int shards = 0;
  /// How a sharded job's members get x̄: direct (every owner sends its slice to every member) | ring (the
  /// owners pass the slices around a ring; a member gets all of x̄ from the owner on its host).
  std::string gather = "direct";
  /// Sharded: the send buffer, in KiB, of each member's connections to owners on other hosts (0 = the
  /// kernel's autotuning).
  int upload_buffer_kib = 0;
  /// Sharded: how slice payloads travel between hosts: none | zstd (each value's top byte through zstd, the
  /// other bytes raw; lossless).
  std::string wire_compress = "none";
  /// Remove a member that heartbeats but has not submitted for this many rounds (0 = never).
  int idle_rounds = 2;
  /// How MODEL and RESTART payloads travel: f32 | bf16 | f16 | int8 (the lossy ones send changes with
  /// error feedback; actors/PROTOCOL.md).
  std::string wire_dtype = "f32";

  friend bool operator==(const schedule_options&, const schedule_options&) = default;
};

/// Holds where the averager saves the trained model (safetensors, PyTorch state_dict names).
struct save_options {
  /// Write the job's final x̄ to this file at the end ("" = don't).
  std::string save_model;
  /// Also keep the x̄ with the best test accuracy so far in best_model_path(save_model), rewritten at
  /// each evaluation that improves on it. @pre save_model set
  bool save_best = false;

  friend bool operator==(const save_options&, const save_options&) = default;
};

/// Holds how a running job is watched and steered: its operators (`prsgd ctl`) and its dashboard. The
/// averager takes these; `prsgd local` passes them on to the averager it starts.
struct operations_options {
  /// Public key files of the clients that may steer the job (`prsgd ctl`) when CURVE is on.
  std::vector<std::string> operator_keys;
  /// The dashboard and /api: ADDR:PORT or PORT (127.0.0.1), port 0 = one the system chooses; "" = off.
  std::string http_bind;
  /// A file holding the bearer token that allows steering over HTTP ("" = HTTP is read-only).
  std::string http_token_file;
  /// Once the dashboard listens, write its URL (one line) to this file ("" = none).
  std::string http_url_file;

  friend bool operator==(const operations_options&, const operations_options&) = default;
};

/// Returns where --save-best writes: `file` with ".best" before its extension (model.safetensors ->
/// model.best.safetensors; no extension: model -> model.best).
[[nodiscard]] std::string best_model_path(const std::string& file);

/// Holds `prsgd head`: the membership/name service other nodes join.
struct head_options {
  output_options output;
  liveness_options liveness;
  /// CURVE server keys and the admitted clients (--curve-server-key does not apply).
  security_options security;
  /// Endpoint to bind, e.g. tcp://0.0.0.0:7400.
  std::string listen;
  /// Once bound, write the bound endpoint (one line) to this file, atomically ("" = none).
  std::string endpoint_file;
};

/// Holds the averager's options for a model it does not build itself (`--model external`): the workers
/// (e.g. PyTorch) own the network, the averager only averages a flat vector of known size, and evaluator
/// processes score x̄.
struct external_options {
  /// Floats in the flat model (0 = from --model-spec).
  std::uint64_t model_size = 0;
  /// JSON or YAML file naming the tensors of the flat vector, in order, with their shapes ("" = none).
  std::string model_spec;
  /// safetensors file holding x̄_0 ("" = the first member's model, sent with its JOIN).
  std::string init_model;
  /// Training samples of the workers' data set (needed: the averager hands out sample ranges and counts
  /// epochs without seeing the data).
  std::uint64_t train_size = 0;
  /// How long an evaluator process may take to score x̄ before that round's test_acc stays null, in ms (also
  /// for a built-in model with --evaluate-on evaluators).
  int eval_timeout_ms = 60000;
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
  /// Run as shard owner "k/K" of a sharded job instead of as its coordinator ("" = the coordinator).
  std::string shard;
  /// A shard owner's coordinator endpoint (the `prsgd averager --topology sharded` process).
  std::string coordinator;
  /// Once bound, write the bound endpoint (one line) to this file, atomically ("" = none).
  std::string endpoint_file;
  /// Head endpoint to register with ("" = standalone).
  std::string head;
  /// --save-model / --save-best.
  save_options save;
  /// --operator-key, --http-bind, --http-token-file, --http-url-file.
  operations_options operations;
  /// --model external: the model's size and layout, its initial value, the training set's size.
  external_options external;
};

/// Holds where a worker or an evaluator finds the averager: its endpoint, or a head that knows it.
struct averager_address_options {
  /// Averager endpoint to join, e.g. tcp://10.77.0.1:7500 ("" = look it up through `head`).
  std::string averager;
  /// Head endpoint to find the averager through ("" = use `averager`).
  std::string head;
  /// With `head`: how long to keep looking the averager up before giving up, in milliseconds. @pre >= 1
  int head_timeout_ms = 60000;
};

/// Holds `prsgd status` and `prsgd ctl`: an operator client of a running averager (never a member).
struct operator_options {
  output_options output;
  liveness_options liveness;
  security_options security;
  /// The averager's endpoint ("" = look it up through `head`).
  std::string averager;
  /// Head endpoint to find the averager through.
  std::string head;
  /// Milliseconds to wait for the answer (and for the head's lookup). @pre >= 1
  int timeout_ms = 5000;
  /// status: print JSON instead of the table.
  bool json = false;
  /// status: refresh every this many seconds (0 = print once).
  double watch_s = 0;
  /// ctl: the action and its argument.
  std::string action;
  std::string arg;
  /// True for `prsgd ctl`, false for `prsgd status`.
  bool steer = false;
};

/// Holds `prsgd worker`: local SGD on one data shard.
struct worker_options {
  output_options output;
  liveness_options liveness;
  security_options security;
  model_options model;
  /// --averager, --head, --head-timeout-ms.
  averager_address_options averager_address;
  /// Artificial delay per local step, in milliseconds (heterogeneity experiments).
  int slowdown_ms = 0;
  /// Give up (status 1) when no averager welcomes this worker within this many milliseconds of starting to
  /// join, or of rejoining after losing its averager; 0 = keep trying. @pre >= 0
  int join_timeout_ms = 600000;
  /// The options of `model` given on the command line or in the --config file (long names with dashes,
  /// e.g. "--batch"); the worker takes the others from the averager's job spec, and these must agree with it.
  std::vector<std::string> given;
};

/// Holds `prsgd evaluator`: scores x̄ on the job's test split for an averager run with --evaluate-on
/// evaluators (or --model external with a spec naming a model this process can build).
struct evaluator_options {
  output_options output;
  liveness_options liveness;
  security_options security;
  /// Only --data-dir, --data-option and --plugin matter in practice: the job's spec names the model and data
  /// set; the others, when given, must agree with it.
  model_options model;
  /// --averager, --head, --head-timeout-ms.
  averager_address_options averager_address;
  /// Give up (status 1) when no averager answers the request for the job's spec within this many
  /// milliseconds; 0 = keep asking. @pre >= 0
  int join_timeout_ms = 600000;
  /// The options of `model` given on the command line or in the --config file (as worker_options::given).
  std::vector<std::string> given;
};

/// Holds `prsgd local`: a whole cluster of separate processes on this machine.
struct local_options {
  output_options output;
  liveness_options liveness;
  model_options model;
  schedule_options schedule;
  /// Number of worker processes. @pre >= 1
  int workers = 2;
  /// Number of `prsgd evaluator` processes; more than 0 makes the averager hand evaluation to them
  /// (--evaluate-on evaluators). @pre >= 0
  int evaluators = 0;
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
  /// --save-model / --save-best, passed to the averager.
  save_options save;
  /// The dashboard and the operators, passed to the averager; with --http-bind and no --http-url-file the
  /// averager writes the dashboard's URL to LOG_DIR/averager.url.
  operations_options operations;
};

/// Holds `prsgd export`: the model of the newest valid checkpoint, as safetensors.
struct export_options {
  /// --log-level, --plugin, --config (the other output options do not apply).
  output_options output;
  /// Checkpoint directory of a running or finished job.
  std::string checkpoint_dir;
  /// The safetensors file to write.
  std::string out;
  /// Model name, needed only for checkpoints that do not record it (older prsgd); must agree otherwise.
  std::string model;
  /// Data set of that model (auto | fashion-mnist | kws), for its input shape; only with --model.
  std::string dataset = "auto";
};

/// Holds `prsgd eval`: scores safetensors weights on a data set's test split.
struct eval_options {
  /// --log-level, --plugin, --config.
  output_options output;
  /// --model (empty: the model named in the weights file's metadata), --dataset, --data-dir.
  model_options model;
  /// The safetensors file.
  std::string weights;
  /// Print JSON instead of tables.
  bool json = false;
  /// Also write one line per test sample (index,label,predicted) to this file ("" = don't).
  std::string predictions;
};

/// Holds `prsgd predict`: top-k classes for inputs given as files.
struct predict_options {
  /// --log-level, --plugin, --config.
  output_options output;
  /// --model (empty: from the weights file's metadata), --dataset (class names, input preprocessing).
  model_options model;
  /// The safetensors file.
  std::string weights;
  /// Classes to print per input. @pre >= 1
  int top_k = 3;
  /// Print one JSON object per sample instead of text.
  bool json = false;
  /// Input files: IDX images, PNG, NPY, or WAV (keyword models).
  std::vector<std::string> inputs;
};

/// Holds `prsgd plot`: curves from metrics JSON-lines files, drawn with gnuplot.
struct plot_options {
  /// The metrics files (--metrics-jsonl), one run each. @pre not empty
  std::vector<std::string> runs;
  /// The picture to write. @pre not empty
  std::string out;
  /// auto (svg when `out` ends in .svg, else png) | png | svg.
  std::string format = "auto";
  /// What is plotted: accuracy | loss | idle | bytes (see plot.hpp).
  std::string y = "accuracy";
  /// Against what: round | rounds | epoch | wall.
  std::string x = "round";
  /// A logarithmic x axis.
  bool log_x = false;
  /// Labels of the runs drawn dashed.
  std::vector<std::string> dashed;
  /// Legend titles by run (default: the file names).
  std::vector<std::string> labels;
  /// Figure title ("" = none).
  std::string title;
  /// Picture size in pixels. @pre >= 100
  int width = 900;
  int height = 560;
};

/// Holds `prsgd models` and `prsgd datasets`: what the registries hold, with --plugin's additions.
struct list_options {
  /// --log-level, --plugin, --config.
  output_options output;
  /// Also check against this data set (its files in `data_dir`) besides the ones whose shape is known.
  std::string dataset;
  std::string data_dir;
  /// Print JSON instead of a table.
  bool json = false;
  /// True for `prsgd datasets`.
  bool datasets = false;
};

/// Holds `prsgd completion`: prints a shell completion script.
struct completion_options {
  /// bash | zsh.
  std::string shell;
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
using command = std::variant<help_request, head_options, averager_options, worker_options, evaluator_options,
                             local_options, keygen_options, export_options, eval_options, predict_options, plot_options,
                             list_options, completion_options, operator_options>;

/// Parses `args` (args[0] is the program name) including a `--config` YAML file, then validates.
/// Returns invalid_argument (bad or unknown option, bad value, unknown YAML key) or not_found
/// (missing config/plugin file) with a one-line context.
[[nodiscard]] expected<command> parse_command_line(const std::vector<std::string>& args);

/// Returns the command-line arguments that parse back into `o` (every option of the group, paths made
/// absolute), from the same option table that parses them: `prsgd local` passes its groups on with these.
[[nodiscard]] std::vector<std::string> to_arguments(const liveness_options& o);
[[nodiscard]] std::vector<std::string> to_arguments(const model_options& o);
[[nodiscard]] std::vector<std::string> to_arguments(const schedule_options& o);
[[nodiscard]] std::vector<std::string> to_arguments(const save_options& o);
[[nodiscard]] std::vector<std::string> to_arguments(const operations_options& o);

/// Returns the `--help` text of the whole program (the subcommand list).
[[nodiscard]] std::string program_help();

/// Returns invalid_argument unless `endpoint` looks like tcp://HOST:PORT, ipc://PATH or inproc://NAME.
[[nodiscard]] expected<void> validate_endpoint(const std::string& endpoint, const std::string& what);

/// Holds an ADDR:PORT (--metrics-bind).
struct host_port {
  std::string host;
  int port = 0;
};

/// Parses "ADDR:PORT" with a numeric IPv4 address and a port in 1..65535; invalid_argument naming `what`.
[[nodiscard]] expected<host_port> parse_host_port(const std::string& text, const std::string& what);

/// Returns the first rule `o` breaks, e.g. "--lr must be > 0 (got 0)".
[[nodiscard]] expected<void> validate(const output_options& o);
[[nodiscard]] expected<void> validate(const liveness_options& o);
[[nodiscard]] expected<void> validate(const security_options& o);
[[nodiscard]] expected<void> validate(const operator_options& o);
[[nodiscard]] expected<void> validate(const model_options& o);
[[nodiscard]] expected<void> validate(const schedule_options& o);
[[nodiscard]] expected<void> validate(const head_options& o);
[[nodiscard]] expected<void> validate(const operations_options& o);
[[nodiscard]] expected<void> validate(const averager_options& o);
/// Parses --shard "k/K" (0 <= k < K); invalid_argument otherwise.
[[nodiscard]] expected<std::pair<std::uint64_t, std::uint64_t>> parse_shard(const std::string& text);
[[nodiscard]] expected<void> validate(const worker_options& o);
[[nodiscard]] expected<void> validate(const evaluator_options& o);
[[nodiscard]] expected<void> validate(const local_options& o);
[[nodiscard]] expected<void> validate(const keygen_options& o);
[[nodiscard]] expected<void> validate(const save_options& o);
[[nodiscard]] expected<void> validate(const export_options& o);
[[nodiscard]] expected<void> validate(const eval_options& o);
[[nodiscard]] expected<void> validate(const predict_options& o);
[[nodiscard]] expected<void> validate(const plot_options& o);
[[nodiscard]] expected<void> validate(const list_options& o);
[[nodiscard]] expected<void> validate(const completion_options& o);

/// Describes one option of a subcommand, for shell completion and the docs check.
struct option_info {
  /// The long name with its dashes, e.g. "--model".
  std::string name;
  /// Whether it takes a value (a flag does not).
  bool takes_value = false;
  /// The values it accepts when they are a fixed list (from its help text "a | b | c"), else empty.
  std::vector<std::string> choices;
  /// Whether its value is a file or directory.
  bool path = false;
  /// Its --help text.
  std::string help;
};

/// Describes a subcommand as its --help shows it.
struct subcommand_info {
  std::string name;
  std::string description;
  std::vector<option_info> options;
};

/// Returns the subcommands `prsgd --help` lists, in order, each with the options its --help lists.
[[nodiscard]] std::vector<subcommand_info> subcommand_options();

}  // namespace prsgd::cli
