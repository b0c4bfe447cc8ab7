// SPDX-License-Identifier: Apache-2.0
// Validation of the parsed option groups: every rule a value must meet, as a one-line usage error.
#include <arpa/inet.h>

#include <charconv>
#include <cmath>
#include <filesystem>

#include "option_tables.hpp"
#include "prsgd/actors/averager_core.hpp"
#include "prsgd/actors/protocol.hpp"
#include "prsgd/algorithms/aggregation.hpp"
#include "prsgd/algorithms/averaging.hpp"
#include "prsgd/algorithms/outer_optimizer.hpp"
#include "prsgd/algorithms/schedule.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::cli {
namespace detail {

expected<void> one_of(const std::string& value, std::initializer_list<std::string_view> allowed,
                      const std::string& what) {
  for (auto a : allowed) {
    if (value == a) {
      return {};
    }
  }
  std::string list;
  for (auto a : allowed) {
    list += list.empty() ? "" : "|";
    list += a;
  }
  return bad(what + " must be one of " + list + " (got '" + value + "')");
}

expected<void> at_least(long long value, long long min, const std::string& what) {
  if (value < min) {
    return bad(what + " must be at least " + str(min) + " (got " + str(value) + ")");
  }
  return {};
}

}  // namespace detail

using detail::at_least;
using detail::bad;
using detail::one_of;
using detail::parsed;
using detail::str;

expected<void> validate_endpoint(const std::string& endpoint, const std::string& what) {
  const auto scheme_end = endpoint.find("://");
  if (scheme_end == std::string::npos) {
    return bad(what + " must look like tcp://HOST:PORT, ipc://PATH or inproc://NAME (got '" + endpoint + "')");
  }
  const std::string scheme = endpoint.substr(0, scheme_end);
  const std::string rest = endpoint.substr(scheme_end + 3);
  if (scheme == "ipc" || scheme == "inproc") {
    if (rest.empty()) {
      return bad(what + " has an empty " + scheme + " name (got '" + endpoint + "')");
    }
    return {};
  }
  if (scheme != "tcp") {
    return bad(what + " must use tcp://, ipc:// or inproc:// (got '" + endpoint + "')");
  }
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return bad(what + " must be tcp://HOST:PORT (got '" + endpoint + "')");
  }
  const std::string port = rest.substr(colon + 1);
  if (port == "*") {
    return {};  // ZeroMQ picks an ephemeral port
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return bad(what + " has a bad port (got '" + endpoint + "')");
  }
  const int p = std::stoi(port);
  if (p < 1 || p > 65535) {
    return bad(what + " port must be 1..65535 (got '" + endpoint + "')");
  }
  return {};
}

expected<void> validate(const output_options& o) {
  log::level lvl{};
  if (!log::parse_level(o.log_level, lvl)) {
    return bad("--log-level must be one of trace|debug|info|warn|error|off (got '" + o.log_level + "')");
  }
  for (const auto& p : o.plugins) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec)) {
      return fail(errc::not_found, "--plugin file '" + p + "' does not exist");
    }
  }
  if (o.metrics_port < 0 || o.metrics_port > 65535) {
    return bad("--metrics-port must be 0..65535 (got " + str(o.metrics_port) + ")");
  }
  if (!o.metrics_bind.empty()) {
    if (o.metrics_port != 0) {
      return bad("give --metrics-port or --metrics-bind, not both");
    }
    PRSGD_TRY(parse_host_port(o.metrics_bind, "--metrics-bind"));
  }
  return one_of(o.progress, {"auto", "plain", "off"}, "--progress");
}

expected<void> validate(const liveness_options& o) {
  PRSGD_TRY(at_least(o.heartbeat_ms, 1, "--heartbeat-ms"));
  if (o.heartbeat_timeout_ms <= o.heartbeat_ms) {
    return bad("--heartbeat-timeout-ms must be greater than --heartbeat-ms (got " + str(o.heartbeat_timeout_ms) +
               " <= " + str(o.heartbeat_ms) + ")");
  }
  if (!(o.slowest_link_mbit > 0) || !std::isfinite(o.slowest_link_mbit)) {
    return bad("--slowest-link-mbit must be a positive number of Mbit/s (got " + std::to_string(o.slowest_link_mbit) +
               ")");
  }
  return {};
}

expected<void> validate(const security_options& o) {
  const bool any = !o.curve_public_key.empty() || !o.curve_secret_key.empty();
  if (any && (o.curve_public_key.empty() || o.curve_secret_key.empty())) {
    return bad("--curve-public-key and --curve-secret-key must be given together");
  }
  if (!any && (!o.curve_server_key.empty() || !o.curve_allow.empty())) {
    return bad(
        "--curve-server-key and --curve-allow need this process's own --curve-public-key and "
        "--curve-secret-key");
  }
  std::vector<const std::string*> files{&o.curve_public_key, &o.curve_secret_key, &o.curve_server_key};
  for (const auto& f : o.curve_allow) {
    files.push_back(&f);
  }
  for (const auto* f : files) {
    std::error_code ec;
    const bool allow_dir = f != &o.curve_public_key && f != &o.curve_secret_key && f != &o.curve_server_key &&
                           std::filesystem::is_directory(*f, ec);
    if (!f->empty() && !allow_dir && !std::filesystem::is_regular_file(*f, ec)) {
      return fail(errc::not_found, "key file '" + *f + "' does not exist");
    }
  }
  return {};
}

/// Returns true when `endpoint` can only be reached from this host: ipc, inproc, or tcp on a loopback host.
bool is_local_endpoint(const std::string& endpoint) {
  const auto scheme_end = endpoint.find("://");
  if (scheme_end == std::string::npos) {
    return false;
  }
  const std::string scheme = endpoint.substr(0, scheme_end);
  if (scheme == "ipc" || scheme == "inproc") {
    return true;
  }
  const std::string rest = endpoint.substr(scheme_end + 3);
  std::string host = rest.substr(0, rest.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

/// Refuses a non-loopback `endpoint` (given as `what`) without CURVE keys, unless --insecure.
expected<void> require_curve_off_loopback(const std::string& endpoint, const std::string& what,
                                          const security_options& s) {
  if (s.insecure || !s.curve_public_key.empty() || is_local_endpoint(endpoint)) {
    return {};
  }
  return bad(what + " " + endpoint +
             " is not a loopback address and no CURVE keys are given: pass --curve-public-key and "
             "--curve-secret-key (from prsgd keygen; see docs/security.md), or --insecure to accept "
             "unauthenticated, unencrypted traffic");
}

expected<void> validate(const model_options& o) {
  if (o.model.empty()) {
    return bad("--model must not be empty");
  }
  if (!o.data_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(o.data_dir, ec)) {
      return fail(errc::not_found, "--data-dir '" + o.data_dir + "' is not a directory");
    }
  }
  PRSGD_TRY(at_least(o.batch, 1, "--batch"));
  if (!(o.lr > 0)) {
    return bad("--lr must be > 0 (got " + str(o.lr) + ")");
  }
  if (!(o.momentum >= 0 && o.momentum < 1)) {
    return bad("--momentum must be in [0, 1) (got " + str(o.momentum) + ")");
  }
  PRSGD_TRY(one_of(o.momentum_on_restart, {"keep", "reset"}, "--momentum-on-restart"));
  // The name itself is checked once the plugins are loaded: a plugin may register data sets.
  if (o.dataset.empty()) {
    return bad("--dataset must not be empty");
  }
  for (const auto& kv : o.data_options) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      return bad("--data-option must be KEY=VALUE (got '" + kv + "')");
    }
  }
  if (!(o.dirichlet_alpha > 0)) {
    return bad("--dirichlet-alpha must be > 0 (got " + str(o.dirichlet_alpha) + ")");
  }
  return {};
}

expected<void> validate(const schedule_options& o) {
  PRSGD_TRY(at_least(o.epochs, 0, "--epochs"));
  PRSGD_TRY(at_least(o.rounds, 0, "--rounds"));
  if (o.epochs == 0 && o.rounds == 0) {
    return bad("one of --epochs or --rounds must be > 0");
  }
  PRSGD_TRY(one_of(o.topology, {"star", "sharded"}, "--topology"));
  PRSGD_TRY(at_least(o.shards, 0, "--shards"));
  if (o.topology == "sharded") {
    if (o.mode != "restarted") {
      return bad("--topology sharded needs --mode restarted (the owners average models, not gradients)");
    }
    if (o.outer != "none") {
      return bad("--topology sharded has no outer optimiser: drop --outer");
    }
    if (o.aggregate == "norm-clip") {
      return bad("--topology sharded runs mean, trimmed-mean and median at the owners, not norm-clip");
    }
  } else if (o.shards != 0) {
    return bad("--shards needs --topology sharded");
  }
  PRSGD_TRY(one_of(o.gather, {"direct", "ring"}, "--gather"));
  if (o.gather != "direct" && o.topology != "sharded") {
    return bad("--gather ring needs --topology sharded");
  }
  PRSGD_TRY(one_of(o.wire_compress, {"none", "zstd"}, "--wire-compress"));
  if (o.wire_compress != "none" && o.topology != "sharded") {
    return bad("--wire-compress zstd needs --topology sharded");
  }
  if (o.upload_buffer_kib != 0) {
    if (o.topology != "sharded") {
      return bad("--upload-buffer-kib needs --topology sharded");
    }
    if (o.upload_buffer_kib < 4 || o.upload_buffer_kib > 65536) {
      return bad("--upload-buffer-kib must be 0 (autotuned) or 4 to 65536 (got " + str(o.upload_buffer_kib) + ")");
    }
  }
  PRSGD_TRY(at_least(o.interval, 1, "--interval"));
  for (int i : o.intervals) {
    PRSGD_TRY(at_least(i, 1, "every --intervals value"));
  }
  PRSGD_TRY(parsed("--interval-policy", algorithms::parse_interval_kind(o.interval_policy)));
  if (o.interval_policy == "per-worker" && o.intervals.empty()) {
    return bad("--interval-policy per-worker needs --intervals, e.g. --intervals 4,8,16");
  }
  if (o.averaging != "auto") {
    PRSGD_TRY(parsed("--averaging", algorithms::parse_averaging_rule(o.averaging), "auto"));
  }
  PRSGD_TRY(parsed("--aggregate", algorithms::parse_aggregate_rule(o.aggregate)));
  if (!(o.trim >= 0 && o.trim < 0.5)) {
    return bad("--trim must be in [0, 0.5) (got " + str(o.trim) + ")");
  }
  if (!(std::isfinite(o.clip) && o.clip >= 0)) {
    return bad("--clip must be >= 0 (got " + str(o.clip) + ")");
  }
  if (!(o.screen_k == 0 || (std::isfinite(o.screen_k) && o.screen_k >= 1))) {
    return bad("--screen-k must be 0 (off) or >= 1 (got " + str(o.screen_k) + ")");
  }
  PRSGD_TRY(parsed("--deadline", actors::parse_deadline_policy(o.deadline)));
  PRSGD_TRY(at_least(o.deadline_ms, 1, "--deadline-ms"));
  if (!(o.deadline_mad_k > 0)) {
    return bad("--deadline-mad-k must be > 0 (got " + str(o.deadline_mad_k) + ")");
  }
  PRSGD_TRY(at_least(o.quorum, 1, "--quorum"));
  PRSGD_TRY(parsed("--step-size", algorithms::parse_lr_kind(o.step_size)));
  if (o.step_size != "constant" && o.step_size != "paper") {
    return bad("--step-size must be constant or paper for the averager (got '" + o.step_size + "')");
  }
  PRSGD_TRY(at_least(o.warmup_rounds, 0, "--warmup-rounds"));
  if (o.outer != "none") {
    PRSGD_TRY(parsed("--outer", algorithms::parse_outer_kind(o.outer), "none"));
  }
  if (o.mode == "minibatch" && o.outer != "none") {
    return bad("--outer applies to --mode restarted; minibatch mode uses --momentum for the averager's step");
  }
  if (!(o.outer_lr > 0)) {
    return bad("--outer-lr must be > 0 (got " + str(o.outer_lr) + ")");
  }
  if (!(o.outer_momentum >= 0 && o.outer_momentum < 1)) {
    return bad("--outer-momentum must be in [0, 1) (got " + str(o.outer_momentum) + ")");
  }
  PRSGD_TRY(at_least(o.eval_every, 0, "--eval-every"));
  if (o.evaluate_on != "averager" && o.evaluate_on != "evaluators") {
    return bad("--evaluate-on must be averager or evaluators (got '" + o.evaluate_on + "')");
  }
  PRSGD_TRY(at_least(o.checkpoint_every, 0, "--checkpoint-every"));
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    return bad("--checkpoint-every needs --checkpoint-dir");
  }
  if ((o.resume || o.fresh) && o.checkpoint_dir.empty()) {
    return bad(std::string(o.resume ? "--resume" : "--fresh") + " needs --checkpoint-dir");
  }
  if (o.resume && o.fresh) {
    return bad("--resume and --fresh contradict each other: pick one");
  }
  PRSGD_TRY(at_least(o.min_workers, 0, "--min-workers"));
  PRSGD_TRY(at_least(o.idle_rounds, 0, "--idle-rounds"));
  PRSGD_TRY(parsed("--wire-dtype", algorithms::parse_wire_dtype(o.wire_dtype)));
  PRSGD_TRY(at_least(o.max_workers, 0, "--max-workers"));
  if (o.max_workers > 0 && o.max_workers < o.min_workers) {
    return bad("--max-workers must not be below --min-workers (got " + str(o.max_workers) + " < " + str(o.min_workers) +
               ")");
  }
  PRSGD_TRY(parsed("--mode", actors::parse_training_mode(o.mode)));
  return {};
}

expected<void> validate(const head_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.security));
  if (o.listen.empty()) {
    return bad("needs --listen ENDPOINT, e.g. --listen tcp://0.0.0.0:7400");
  }
  PRSGD_TRY(validate_endpoint(o.listen, "--listen"));
  return require_curve_off_loopback(o.listen, "--listen", o.security);
}

namespace {

// --model external and its options: they go together, and the job must be one the averager can run
// without the model (restarted SGD on IID sample ranges).
expected<void> validate_external(const averager_options& o) {
  const external_options& e = o.external;
  const bool external = o.model.model == "external";
  if (!external) {
    if (e.model_size != 0 || !e.model_spec.empty() || !e.init_model.empty() || e.train_size != 0) {
      return bad("--model-size, --model-spec, --init-model and --train-size apply to --model external only");
    }
    return {};
  }
  if (e.model_size == 0 && e.model_spec.empty()) {
    return bad("--model external needs --model-size P (floats in the flat model) or --model-spec FILE");
  }
  if (e.train_size == 0) {
    return bad("--model external needs --train-size N (training samples in the workers' data set)");
  }
  if (o.schedule.mode != "restarted") {
    return bad(
        "--model external trains with --mode restarted only (the averager cannot tell parameters "
        "from buffers to step them itself)");
  }
  if (o.model.non_iid) {
    return bad("--model external hands out IID sample ranges; --non-iid needs a model the averager knows");
  }
  PRSGD_TRY(at_least(e.eval_timeout_ms, 1, "--eval-timeout-ms"));
  return {};
}

}  // namespace

expected<std::pair<std::uint64_t, std::uint64_t>> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  std::uint64_t k = 0;
  std::uint64_t n = 0;
  const auto digits = [](std::string_view v) {
    return !v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (slash != std::string::npos && digits(std::string_view{text}.substr(0, slash)) &&
      digits(std::string_view{text}.substr(slash + 1))) {
    k = std::stoull(text.substr(0, slash));
    n = std::stoull(text.substr(slash + 1));
  }
  if (n == 0 || k >= n) {
    return bad("--shard must be k/K with 0 <= k < K, e.g. --shard 0/4 (got '" + text + "')");
  }
  return std::make_pair(k, n);
}

expected<void> validate(const averager_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.security));
  PRSGD_TRY(validate(o.model));
  PRSGD_TRY(validate(o.schedule));
  PRSGD_TRY(validate_external(o));
  if (o.model.model == "external" && (o.schedule.topology == "sharded" || !o.shard.empty())) {
    return bad("--model external runs with --topology star only");
  }
  if (!o.shard.empty() || !o.coordinator.empty()) {
    PRSGD_TRY(parse_shard(o.shard));
    if (o.coordinator.empty()) {
      return bad("--shard needs --coordinator ENDPOINT: the `prsgd averager --topology sharded` process");
    }
    PRSGD_TRY(validate_endpoint(o.coordinator, "--coordinator"));
  } else if (o.schedule.topology == "sharded" && o.schedule.shards < 1) {
    return bad("--topology sharded needs --shards K (the number of `prsgd averager --shard k/K` processes)");
  }
  if (o.listen.empty()) {
    return bad("needs --listen ENDPOINT, e.g. --listen tcp://0.0.0.0:7500");
  }
  PRSGD_TRY(validate_endpoint(o.listen, "--listen"));
  PRSGD_TRY(require_curve_off_loopback(o.listen, "--listen", o.security));
  if (!o.head.empty()) {
    PRSGD_TRY(validate_endpoint(o.head, "--head"));
    PRSGD_TRY(require_curve_off_loopback(o.head, "--head", o.security));
  }
  PRSGD_TRY(validate(o.operations));
  return validate(o.save);
}

expected<void> validate(const operations_options& o) {
  if (o.http_bind.empty() && (!o.http_token_file.empty() || !o.http_url_file.empty())) {
    return bad("--http-token-file and --http-url-file need --http-bind");
  }
  return {};
}

namespace {

// A client of the averager (worker, status, ctl) names it directly or through a head.
expected<void> validate_averager_or_head(const std::string& averager, const std::string& head,
                                         const security_options& security) {
  if (averager.empty() && head.empty()) {
    return bad("needs --averager ENDPOINT (or --head ENDPOINT)");
  }
  if (!averager.empty()) {
    PRSGD_TRY(validate_endpoint(averager, "--averager"));
    PRSGD_TRY(require_curve_off_loopback(averager, "--averager", security));
  }
  if (!head.empty()) {
    PRSGD_TRY(validate_endpoint(head, "--head"));
    PRSGD_TRY(require_curve_off_loopback(head, "--head", security));
  }
  return {};
}

// A worker or an evaluator: the averager named directly or through a head, and how long to look it up.
expected<void> validate(const averager_address_options& o, const security_options& security) {
  PRSGD_TRY(validate_averager_or_head(o.averager, o.head, security));
  return at_least(o.head_timeout_ms, 1, "--head-timeout-ms");
}

}  // namespace

expected<void> validate(const worker_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.security));
  PRSGD_TRY(validate(o.model));
  if (o.model.model == "external") {
    return bad("--model external is for the averager; its workers are Python processes (prsgd.torch)");
  }
  PRSGD_TRY(validate(o.averager_address, o.security));
  if (!o.security.curve_public_key.empty() && o.security.curve_server_key.empty()) {
    return bad("a worker with CURVE keys needs --curve-server-key (the averager's public key file)");
  }
  PRSGD_TRY(at_least(o.join_timeout_ms, 0, "--join-timeout-ms"));
  return at_least(o.slowdown_ms, 0, "--slowdown-ms");
}

expected<void> validate(const evaluator_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.security));
  PRSGD_TRY(validate(o.model));
  PRSGD_TRY(validate(o.averager_address, o.security));
  if (!o.security.curve_public_key.empty() && o.security.curve_server_key.empty()) {
    return bad("an evaluator with CURVE keys needs --curve-server-key (the averager's public key file)");
  }
  return at_least(o.join_timeout_ms, 0, "--join-timeout-ms");
}

expected<void> validate(const local_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.model));
  PRSGD_TRY(validate(o.schedule));
  if (o.model.model == "external") {
    return bad("--model external has no C++ workers: run `prsgd averager --model external` with Python workers");
  }
  PRSGD_TRY(at_least(o.workers, 1, "--workers"));
  PRSGD_TRY(at_least(o.evaluators, 0, "--evaluators"));
  if (o.slowdown_ms.size() > 1 && o.slowdown_ms.size() != static_cast<std::size_t>(o.workers)) {
    return bad("--slowdown-ms needs one value or one per worker (got " + str(o.slowdown_ms.size()) + " for " +
               str(o.workers) + " workers)");
  }
  for (int s : o.slowdown_ms) {
    PRSGD_TRY(at_least(s, 0, "every --slowdown-ms value"));
  }
  if (o.schedule.interval_policy == "per-worker" && o.schedule.intervals.size() > 1 &&
      o.schedule.intervals.size() != static_cast<std::size_t>(o.workers)) {
    return bad("--intervals needs one value per worker (got " + str(o.schedule.intervals.size()) + " for " +
               str(o.workers) + " workers)");
  }
  if (o.schedule.min_workers > o.workers) {
    return bad("--min-workers must not exceed --workers (got " + str(o.schedule.min_workers) + " > " + str(o.workers) +
               ")");
  }
  if (o.log_dir.empty()) {
    return bad("--log-dir must not be empty");
  }
  if (o.port < 0 || o.port > 65535) {
    return bad("--port must be 0..65535 (got " + str(o.port) + ")");
  }
  PRSGD_TRY(validate(o.save));
  PRSGD_TRY(validate(o.operations));
  return at_least(o.grace_s, 0, "--grace-s");
}

expected<void> validate(const operator_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.security));
  PRSGD_TRY(validate_averager_or_head(o.averager, o.head, o.security));
  PRSGD_TRY(at_least(o.timeout_ms, 1, "--timeout-ms"));
  if (!o.security.curve_public_key.empty() && o.security.curve_server_key.empty()) {
    return bad("with CURVE keys, needs --curve-server-key (the averager's public key file)");
  }
  if (!(o.watch_s >= 0) || o.watch_s > 86400) {
    return bad("--watch takes seconds in (0, 86400]");
  }
  if (o.steer) {
    if (o.action.empty()) {
      return bad(
          "needs an action: pause | resume | remove ID | set-interval N | set-policy P | set-deadline D | "
          "checkpoint | stop");
    }
    auto op = actors::parse_control_op(o.action);
    if (!op) {
      return bad(op.error().context);
    }
    if (actors::needs_argument(*op) && o.arg.empty()) {
      return bad(o.action + " needs an argument");
    }
    if (!actors::needs_argument(*op) && !o.arg.empty()) {
      return bad(o.action + " takes no argument (got '" + o.arg + "')");
    }
  }
  return {};
}

expected<void> validate(const keygen_options& o) {
  if (o.out_dir.empty()) {
    return bad("--out-dir must not be empty");
  }
  if (o.name.empty() || o.name.find('/') != std::string::npos) {
    return bad("--name must be a plain file name (got '" + o.name + "')");
  }
  return {};
}

std::string best_model_path(const std::string& file) {
  const std::filesystem::path p{file};
  if (!p.has_extension()) {
    return file + ".best";
  }
  auto out = p;
  out.replace_extension(".best" + p.extension().string());
  return out.string();
}

expected<void> validate(const save_options& o) {
  if (o.save_best && o.save_model.empty()) {
    return bad("--save-best needs --save-model FILE (the best model goes beside it, e.g. model.best.safetensors)");
  }
  return {};
}

namespace {
// The model tools take --model from the weights file when it is not given; the rest is checked as usual.
expected<void> validate_tool_model(const model_options& o) {
  model_options m = o;
  if (m.model.empty()) {
    m.model = "(from the weights file)";
  }
  return validate(m);
}
}  // namespace

expected<void> validate(const export_options& o) {
  PRSGD_TRY(validate(o.output));
  if (o.checkpoint_dir.empty() || o.out.empty()) {
    return bad("needs --checkpoint-dir DIR and --out FILE");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(o.checkpoint_dir, ec)) {
    return fail(errc::not_found, "--checkpoint-dir '" + o.checkpoint_dir + "' is not a directory");
  }
  return one_of(o.dataset, {"auto", "fashion-mnist", "kws"}, "--dataset");
}

expected<void> validate(const eval_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate_tool_model(o.model));
  if (o.weights.empty()) {
    return bad("needs --weights FILE");
  }
  return {};
}

expected<void> validate(const predict_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate_tool_model(o.model));
  if (o.weights.empty()) {
    return bad("needs --weights FILE");
  }
  PRSGD_TRY(at_least(o.top_k, 1, "--top-k"));
  if (o.inputs.empty()) {
    return bad("needs at least one INPUT file (IDX, PNG, NPY or WAV)");
  }
  return {};
}

expected<void> validate(const plot_options& o) {
  if (o.runs.empty()) {
    return bad("needs at least one METRICS.jsonl file");
  }
  if (o.out.empty()) {
    return bad("needs -o FILE");
  }
  PRSGD_TRY(one_of(o.y, {"accuracy", "loss", "idle", "bytes"}, "--y"));
  PRSGD_TRY(one_of(o.x, {"round", "rounds", "epoch", "wall"}, "--x"));
  PRSGD_TRY(one_of(o.format, {"auto", "png", "svg"}, "--format"));
  if (o.labels.size() > o.runs.size()) {
    return bad("--label given " + str(o.labels.size()) + " times for " + str(o.runs.size()) + " runs");
  }
  PRSGD_TRY(at_least(o.width, 100, "--width"));
  PRSGD_TRY(at_least(o.height, 100, "--height"));
  for (const auto& f : o.runs) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec)) {
      return fail(errc::not_found, "metrics file '" + f + "' does not exist");
    }
  }
  return {};
}

expected<void> validate(const list_options& o) {
  PRSGD_TRY(validate(o.output));
  if (!o.data_dir.empty() && o.dataset.empty()) {
    return bad("--data-dir needs --dataset");
  }
  return {};
}

expected<void> validate(const completion_options& o) { return one_of(o.shell, {"bash", "zsh"}, "the shell"); }

expected<host_port> parse_host_port(const std::string& text, const std::string& what) {
  const auto colon = text.rfind(':');
  const auto usage = [&] {
    return bad(
        what +
        " must be ADDR:PORT with an IPv4 address and a port 0..65535 (0: any free one), e.g. 0.0.0.0:9400 (got '" +
        text + "')");
  };
  if (colon == std::string::npos || colon == 0) {
    return usage();
  }
  host_port out;
  out.host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port);
  if (ec != std::errc{} || end != port.data() + port.size() || out.port < 0 || out.port > 65535) {
    return usage();
  }
  in_addr addr{};
  if (::inet_pton(AF_INET, out.host.c_str(), &addr) != 1) {
    return usage();
  }
  return out;
}

}  // namespace prsgd::cli
