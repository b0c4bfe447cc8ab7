// SPDX-License-Identifier: Apache-2.0
// The long-running roles: averager and worker (the head is in head_role.cpp). Each starts with
// prepare_process() (log level, plugins, model name check), loads its data, builds an actor system and a
// ZeroMQ transport, starts its actor and waits for the job to end or for SIGINT/SIGTERM.
//
// Signals: SIGINT and SIGTERM are blocked in every thread we start and taken with sigtimedwait() by the
// main thread; a thread started before main (OpenBLAS's pool) that receives one only records it in a flag
// the main thread reads, so the actions below never run in async-signal context.
//  - worker: LEAVE, then exit 3 (exit_stopped; the averager stops waiting for it at once).
//  - averager with --checkpoint-dir: checkpoint the open round and exit 3 without stopping the workers; a
//    restarted averager resumes the round and the workers rejoin it by themselves.
//  - averager without --checkpoint-dir: end the job (STOP to every worker, final evaluation, done line),
//    exit 3. The workers it stops exit 0: for them the job has finished.
//  A second signal exits at once (128 + the signal). Status 3 lets a supervisor (a Kubernetes Job, Slurm,
//  systemd) tell a stop it asked for from a finished job (0) and from a failure (1).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <variant>

#include "averager_client.hpp"
#include "commands.hpp"
#include "dashboard_server.hpp"
#include "external_model.hpp"
#include "head_role.hpp"
#include "model_commands.hpp"
#include "prometheus_metrics.hpp"
#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/shard_owner_actor.hpp"
#include "prsgd/actors/worker_actor.hpp"
#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"
#include "prsgd/cli/job_data.hpp"
#include "prsgd/cli/key_files.hpp"
#include "prsgd/cli/progress.hpp"
#include "prsgd/cli/role_config.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/common/secure_random.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/transport/zmq_transport.hpp"

namespace prsgd::cli {
namespace {

using namespace std::chrono_literals;

/// A one-shot flag the actors' callbacks set and main waits on.
struct done_flag {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  void set() {
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  }
  bool wait_for(std::chrono::milliseconds d) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, d, [&] { return done; });
  }
};

expected<transport_config> make_transport_config(const std::string& node_name, const liveness_options& live,
                                                 const security_options& sec) {
  transport_config cfg;
  cfg.node_name = node_name;
  // The transport's own liveness only feeds logs and reconnects; membership uses the protocol heartbeats.
  cfg.heartbeat_interval = std::chrono::milliseconds{live.heartbeat_ms};
  cfg.heartbeat_timeout = std::chrono::milliseconds{live.heartbeat_timeout_ms};
  auto curve = load_curve(sec);
  PRSGD_TRY(curve);
  cfg.curve = std::move(curve->own);
  return cfg;
}

actors::transport_factory zmq_factory(transport_config cfg) {
  return [cfg](transport_handlers h) { return make_transport("zmq", cfg, std::move(h)); };
}

/// Opens --checkpoint-dir (locked for this averager) and decides what this start means for the job
/// in it; hands the store to `cfg`. Returns the exit status when the averager must not run: the
/// directory is in use, holds another job or model (2), nothing to resume with --resume (2), or a
/// finished job (0, nothing written).
std::optional<int> open_checkpoints(const averager_options& o, actors::averager_actor_config& cfg) {
  const std::string& dir = o.schedule.checkpoint_dir;
  auto made = actors::file_checkpoint_store::make(dir);
  if (!made) {
    std::fprintf(stderr, "prsgd averager: %s\n", made.error().message().c_str());
    return exit_failure;
  }
  auto store = std::make_shared<actors::file_checkpoint_store>(std::move(*made));
  if (o.schedule.fresh) {
    auto moved = store->set_aside();
    if (!moved) {
      std::fprintf(stderr, "prsgd averager: --fresh: %s\n", moved.error().message().c_str());
      return exit_failure;
    }
    if (!moved->empty()) {
      PRSGD_LOG(info, "averager") << "--fresh: the previous job's checkpoints are in " << moved->string();
    }
  } else if (auto newest = store->read_newest(); !newest) {
    if (o.schedule.resume) {
      std::fprintf(stderr, "prsgd averager: --resume: no valid checkpoint in %s to resume\n", dir.c_str());
      return exit_usage;
    }
  } else {
    const auto& was = newest->identity;
    const auto& now = cfg.core.model_identity;
    if (was && now &&
        (was->name != now->name || was->channels != now->channels || was->height != now->height ||
         was->width != now->width || was->classes != now->classes)) {
      std::fprintf(stderr,
                   "prsgd averager: %s holds a job of model %s, not %s; use another --checkpoint-dir, or "
                   "--fresh to start this job there\n",
                   dir.c_str(), was->name.c_str(), now->name.c_str());
      return exit_usage;
    }
    if (was && now && !was->fingerprint.empty() && was->fingerprint != now->fingerprint && !o.schedule.resume) {
      std::fprintf(stderr,
                   "prsgd averager: %s holds another job (fingerprint %s, this one %s: the data set or "
                   "seed differ); --resume continues it with these options, --fresh starts this job there\n",
                   dir.c_str(), was->fingerprint.c_str(), now->fingerprint.c_str());
      return exit_usage;
    }
    if (newest->finished) {
      std::fprintf(stderr,
                   "prsgd averager: the job in %s already finished (%llu rounds, %llu trained); nothing to "
                   "do (--fresh starts a new job there)\n",
                   dir.c_str(), static_cast<unsigned long long>(newest->round),
                   static_cast<unsigned long long>(newest->rounds_completed));
      return 0;
    }
  }
  cfg.checkpoints = std::move(store);
  cfg.checkpoint_dir.clear();
  return std::nullopt;
}

actors::incarnation_t now_ms() {
  return static_cast<actors::incarnation_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

/// Runs `prsgd averager --shard k/K --coordinator EP`: one shard owner of a sharded job. It needs no
/// data and no model: the coordinator hands it its slice of x̄. Exits 0 when the coordinator ends the
/// job, 1 when the owner cannot go on, 3 on SIGINT/SIGTERM.
int run_shard_owner(const averager_options& o, const sigset_t& signals) {
  auto shard = parse_shard(o.shard);
  if (!shard) {
    std::fprintf(stderr, "prsgd averager: %s\n", shard.error().message().c_str());
    return exit_usage;
  }
  if (auto p = prepare_process(o.output, o.model.model, resolve_dataset(o.model)); !p) {
    std::fprintf(stderr, "prsgd averager: %s\n", p.error().message().c_str());
    return exit_usage;
  }
  auto tcfg = make_transport_config("shard-" + std::to_string(shard->first), o.liveness, o.security);
  if (!tcfg) {
    std::fprintf(stderr, "prsgd averager: %s\n", tcfg.error().message().c_str());
    return exit_usage;
  }
  auto curve = load_curve(o.security);
  if (!curve) {
    std::fprintf(stderr, "prsgd averager: %s\n", curve.error().message().c_str());
    return exit_usage;
  }
  // With CURVE, the owner serves the workers with the job's server key pair and reaches the coordinator
  // with --curve-server-key (default: its own public key; every averager process of a job shares one pair).
  connect_options to_coordinator;
  to_coordinator.server_public_key = curve->server_public_key;
  actors::shard_owner_actor_config cfg;
  cfg.core.shard = shard->first;
  cfg.core.shards = shard->second;
  cfg.core.incarnation = secure_random_u64();
  cfg.core.heartbeat_interval = std::chrono::milliseconds{o.liveness.heartbeat_ms};
  // A ring gather's owners reach each other like the coordinator, with the job's key pair: a SHARD_RELAY
  // is taken only from a connection that proved it.
  cfg.next_connect = to_coordinator;
  cfg.next_timeout = std::chrono::milliseconds{o.liveness.heartbeat_timeout_ms};
  if (curve->own) {
    cfg.relay_key = curve->own->public_key;
  }
  done_flag finished;
  std::optional<std::string> failure;
  std::mutex failure_mu;
  cfg.on_finished = [&](const std::optional<std::string>& why) {
    {
      std::lock_guard lock(failure_mu);
      failure = why;
    }
    finished.set();
  };
  config sc;
  sc.threads = 1;
  sc.compute_threads = 1;
  actor_system system{sc};
  std::shared_ptr<transport> link;
  auto started = actors::start_shard_owner(system, std::move(cfg), zmq_factory(*tcfg), o.listen, o.coordinator, &link,
                                           to_coordinator);
  if (!started) {
    std::fprintf(stderr, "prsgd averager: shard owner cannot start on %s: %s\n", o.listen.c_str(),
                 started.error().message().c_str());
    return exit_failure;
  }
  PRSGD_LOG(info, "shard-owner") << "shard " << o.shard << " listening on " << started->second << ", coordinator "
                                 << o.coordinator;
  if (!announce_endpoint("averager", o.endpoint_file, started->second)) {
    link->stop();
    return exit_failure;
  }
  int status = 0;
  int signals_seen = 0;
  while (!finished.wait_for(0ms)) {
    if (!started->first.alive()) {
      std::fprintf(stderr, "prsgd averager: the shard owner actor stopped unexpectedly (see the log)\n");
      status = exit_failure;
      break;
    }
    if (const int sig = take_signal(signals, 200ms); sig != 0) {
      ++signals_seen;
      break;
    }
  }
  link->stop();
  system.shutdown(5s);
  std::lock_guard lock(failure_mu);
  if (status == 0 && failure) {
    std::fprintf(stderr, "prsgd averager: shard owner %s: %s\n", o.shard.c_str(), failure->c_str());
    return exit_failure;
  }
  return status == 0 && signals_seen > 0 ? exit_stopped : status;
}

}  // namespace

int run_averager(const averager_options& given) {
  const sigset_t signals = block_stop_signals();
  if (!given.shard.empty()) {
    return run_shard_owner(given, signals);
  }
  const bool external = given.model.model == external_model_name;
  if (auto p = external ? prepare_process(given.output)
                        : prepare_process(given.output, given.model.model, resolve_dataset(given.model));
      !p) {
    std::fprintf(stderr, "prsgd averager: %s\n", p.error().message().c_str());
    return exit_usage;
  }
  // --model external: the size (from --model-spec when --model-size is not given) and x̄_0 (--init-model).
  averager_options o = given;
  external_model ext;
  if (external) {
    auto loaded = load_external_model(o.external);
    if (!loaded) {
      std::fprintf(stderr, "prsgd averager: %s\n", loaded.error().message().c_str());
      return data_error_status(loaded.error());
    }
    ext = std::move(*loaded);
    o.external.model_size = ext.size;
  }
  if (auto made = make_parent_directory(o.output.metrics_jsonl, "--metrics-jsonl"); !made) {
    std::fprintf(stderr, "prsgd averager: %s\n", made.error().message().c_str());
    return exit_failure;
  }
  std::unique_ptr<prometheus_metrics> prom;  // --metrics-port: outlives the actor system declared below
  if (o.output.metrics_port != 0 || !o.output.metrics_bind.empty()) {
    auto where = o.output.metrics_bind.empty()
                     ? host_port{"127.0.0.1", o.output.metrics_port}
                     : parse_host_port(o.output.metrics_bind, "--metrics-bind").value_or(host_port{});
    auto bound = prometheus_metrics::bind(where.port, where.host,
                                          o.output.metrics_bind.empty() ? "--metrics-port " + std::to_string(where.port)
                                                                        : "--metrics-bind " + o.output.metrics_bind);
    if (!bound) {
      std::fprintf(stderr, "prsgd averager: %s\n", bound.error().message().c_str());
      return exit_failure;
    }
    prom = std::move(*bound);
    PRSGD_LOG(info, "averager") << "metrics on http://" << where.host << ":" << prom->port() << "/metrics";
  }
  auto data = external ? expected<job_data>{job_data{}} : load_job_data(o.model, data_need::train_size_and_test);
  if (!data) {
    std::fprintf(stderr, "prsgd averager: %s\n", data.error().message().c_str());
    return data_error_status(data.error());
  }
  if (external) {
    data->name = external_model_name;
    data->train_size = static_cast<std::size_t>(o.external.train_size);
  }
  auto fits = external ? expected<std::size_t>{ext.size} : check_model_fits(o.model, *data);
  if (!fits) {
    std::fprintf(stderr, "prsgd averager: %s\n", fits.error().message().c_str());
    return exit_usage;
  }
  auto plan = plan_job(o.schedule, static_cast<std::size_t>(o.model.batch), data->train_size);
  if (!plan) {
    std::fprintf(stderr, "prsgd averager: %s\n", plan.error().message().c_str());
    return exit_usage;
  }
  PRSGD_LOG(info, "averager") << "model " << o.model.model << " on " << data->name << ": " << data->train_size
                              << " training samples; " << plan->steps_per_epoch
                              << " steps per worker and epoch, I=" << plan->interval << ", " << plan->rounds_per_epoch
                              << " rounds per epoch, " << plan->rounds << " rounds";

  auto mapped = averager_config_from(o, *data, *plan, now_ms());
  if (!mapped) {
    std::fprintf(stderr, "prsgd averager: %s\n", mapped.error().message().c_str());
    return exit_usage;
  }
  actors::averager_actor_config cfg = std::move(*mapped);
  // The model identity for checkpoints, and --save-model / --save-best (model_commands.cpp).
  auto saver = external ? expected<std::unique_ptr<model_saver>>{prepare_external_output(
                              cfg, o.save, ext, o.external.train_size, o.model.seed)}
                        : prepare_model_output(cfg, o.save, o.model, *data);
  if (external) {
    cfg.external_size = ext.size;
    cfg.initial_model = std::move(ext.initial);
  }
  if (!saver) {
    std::fprintf(stderr, "prsgd averager: %s\n", saver.error().message().c_str());
    return exit_usage;
  }

  if (!o.schedule.checkpoint_dir.empty()) {
    if (auto status = open_checkpoints(o, cfg)) {
      return *status;
    }
  }

  done_flag finished;
  std::optional<actors::job_summary> summary;
  std::mutex summary_mu;
  // The reporter is used by the actor's strand while the job runs and by this thread after shutdown.
  std::optional<progress_reporter> reporter = make_progress_reporter(o.output.progress);
  progress_snapshot snapshot;
  snapshot.total_rounds = static_cast<long>(plan->rounds);
  std::uint64_t samples_seen = 0;
  // The dashboard's data (--http-bind): every metrics line and operator event, as written.
  auto feed = std::make_shared<metrics_feed>();
  cfg.on_control = [feed](const actors::control_event& e) { feed->add_event(actors::to_json_line(e)); };
  cfg.on_round = [&](const actors::round_metrics& m) {
    samples_seen += m.samples;
    snapshot.round = static_cast<long>(m.trained_rounds);  // empty rounds do not count toward the plan
    snapshot.epoch = m.epoch.value_or(0);
    snapshot.members = static_cast<int>(m.members);
    snapshot.train_loss = m.train_loss;
    if (m.test_acc) {
      snapshot.test_acc = m.test_acc;
    }
    snapshot.elapsed_s = m.wall_s;
    snapshot.samples_per_s = m.wall_s > 0 ? static_cast<double>(samples_seen) / m.wall_s : 0;
    if (reporter) {
      reporter->update(snapshot);
    }
    if (prom) {
      prom->record(m);
    }
    feed->add_round(m.round, actors::to_json_line(m));
  };
  cfg.on_drop = [&](std::string_view reason, std::uint64_t count) {
    if (prom) {
      prom->record_drop(reason, count);
    }
  };
  // The inbox holds at least two models per expected member and a few more, whatever the default.
  cfg.inbox_max_bytes =
      std::max(cfg.inbox_max_bytes,
               2 * (static_cast<std::size_t>(std::max(o.schedule.min_workers, 1)) + 4) * *fits * sizeof(float));
  cfg.on_done = [&](const actors::job_summary& s) {
    {
      std::lock_guard lock(summary_mu);
      summary = s;
    }
    finished.set();
  };
  std::optional<std::string> failure;  // sharded: a shard owner failed (under summary_mu)
  cfg.on_failed = [&](const std::string& why) {
    {
      std::lock_guard lock(summary_mu);
      failure = why;
    }
    finished.set();
  };

  auto tcfg = make_transport_config("averager", o.liveness, o.security);
  if (!tcfg) {
    std::fprintf(stderr, "prsgd averager: %s\n", tcfg.error().message().c_str());
    return exit_usage;
  }
  // Steering (`prsgd ctl`): with CURVE the --operator-key clients, without it loopback clients only.
  cfg.steering.curve = tcfg->curve.has_value();
  if (!o.operations.operator_keys.empty() && !cfg.steering.curve) {
    std::fprintf(stderr,
                 "prsgd averager: --operator-key needs CURVE (--curve-public-key and --curve-secret-key); "
                 "without CURVE only loopback clients may steer\n");
    return exit_usage;
  }
  for (const auto& file : o.operations.operator_keys) {
    auto key = read_key_file(file);
    if (!key) {
      std::fprintf(stderr, "prsgd averager: --operator-key: %s\n", key.error().message().c_str());
      return exit_usage;
    }
    cfg.steering.operator_keys.push_back(*key);
  }
  std::optional<http_bind> http;
  std::string http_token;
  if (!o.operations.http_bind.empty()) {
    auto where = parse_http_bind(o.operations.http_bind);
    if (!where) {
      std::fprintf(stderr, "prsgd averager: %s\n", where.error().message().c_str());
      return exit_usage;
    }
    http = *where;
    if (!o.operations.http_token_file.empty()) {
      auto token = read_token_file(o.operations.http_token_file);
      if (!token) {
        std::fprintf(stderr, "prsgd averager: --http-token-file: %s\n", token.error().message().c_str());
        return exit_usage;
      }
      http_token = *token;
    }
  }
  if (auto limited = limit_frames_to_model(*tcfg, *fits); !limited) {
    std::fprintf(stderr, "prsgd averager: %s\n", limited.error().message().c_str());
    return exit_usage;
  }
  config sc;
  sc.threads = 1;
  sc.compute_threads = 1;  // the evaluator; the barrier itself stays on the actor thread
  actor_system system{sc};
  std::shared_ptr<transport> link;
  auto started = actors::start_averager(system, std::move(cfg), zmq_factory(*tcfg), o.listen, &link);
  if (!started) {
    std::fprintf(stderr, "prsgd averager: cannot start on %s: %s\n", o.listen.c_str(),
                 started.error().message().c_str());
    return exit_failure;
  }
  auto ref = started->first;
  PRSGD_LOG(info, "averager") << "listening on " << started->second;
  if (!announce_endpoint("averager", o.endpoint_file, started->second)) {
    link->stop();
    return exit_failure;
  }
  std::unique_ptr<dashboard_server> dashboard;
  if (http) {
    dashboard_sources sources;
    sources.metrics = feed;
    sources.status_json = [ref]() -> std::string {
      auto s = ref.ask(&actors::averager_actor::status).get(2s);
      return s ? actors::to_json(*s) : std::string{};
    };
    sources.token = http_token;
    sources.control = [ref](const std::string& action, const std::string& arg) -> std::pair<bool, std::string> {
      auto op = actors::parse_control_op(action);
      if (!op) {
        return {false, op.error().context};
      }
      auto r = ref.ask(&actors::averager_actor::control, *op, arg, std::string{"http"}).get(5s);
      if (!r) {
        return {false, r.error().message()};
      }
      return {r->ok, r->text};
    };
    auto served = dashboard_server::start(*http, std::move(sources));
    if (!served) {
      std::fprintf(stderr, "prsgd averager: %s\n", served.error().message().c_str());
      link->stop();
      return exit_failure;
    }
    dashboard = std::move(*served);
    PRSGD_LOG(info, "averager") << "dashboard on " << dashboard->url()
                                << (http_token.empty() ? " (read-only)" : " (steering with the bearer token)");
    if (!announce_endpoint("averager", o.operations.http_url_file, dashboard->url())) {
      link->stop();
      return exit_failure;
    }
  }
  std::optional<head_registration> registration;
  if (!o.head.empty()) {
    auto reg = register_averager(o.head, started->second, o.liveness, o.security);
    if (!reg) {
      std::fprintf(stderr, "prsgd averager: %s\n", reg.error().message().c_str());
      link->stop();
      return exit_failure;
    }
    registration.emplace(std::move(*reg));
  }

  int signals_seen = 0;
  int status = 0;
  while (!finished.wait_for(0ms)) {
    if (prom) {
      prom->record_transport(link->stats());
    }
    if (!ref.alive()) {
      std::fprintf(stderr, "prsgd averager: the averager actor stopped unexpectedly (see the log)\n");
      status = exit_failure;
      break;
    }
    if (const int sig = take_signal(signals, 200ms); sig != 0) {
      ++signals_seen;
      if (signals_seen > 1) {
        std::fprintf(stderr, "prsgd averager: second signal, exiting now\n");
        status = 128 + sig;
        break;
      }
      PRSGD_LOG(info, "averager") << "signal " << sig << ": "
                                  << (o.schedule.checkpoint_dir.empty() ? "ending the job"
                                                                        : "checkpointing and exiting");
      if (o.schedule.checkpoint_dir.empty()) {
        ref.tell(&actors::averager_actor::finish);
      } else {
        ref.tell(&actors::averager_actor::suspend);
      }
    }
  }
  {
    std::lock_guard lock(summary_mu);
    if (status == 0 && failure) {
      std::fprintf(stderr, "prsgd averager: %s; the job stops\n", failure->c_str());
      status = exit_failure;
    }
  }
  if (status == 0 || status == exit_failure) {
    std::this_thread::sleep_for(300ms);  // let the STOPs leave before the sockets close
  }
  registration.reset();
  dashboard.reset();
  link->stop();
  system.shutdown(5s);
  if (reporter) {
    reporter->finish();
  }
  if (status == 0) {
    std::lock_guard lock(summary_mu);
    if (summary) {
      const std::string loss =
          summary->test_loss ? ", test loss " + std::to_string(*summary->test_loss) : std::string{};
      std::fprintf(stderr,
                   "prsgd averager: done: %llu rounds, test accuracy %s%s, %.1f s, late %llu, duplicate %llu, "
                   "rejected %llu\n",
                   static_cast<unsigned long long>(summary->rounds),
                   summary->test_acc ? std::to_string(*summary->test_acc).c_str() : "n/a", loss.c_str(),
                   summary->wall_s, static_cast<unsigned long long>(summary->counters.late),
                   static_cast<unsigned long long>(summary->counters.duplicate),
                   static_cast<unsigned long long>(summary->counters.rejected));
    }
  }
  if (*saver) {
    if (auto saved = (*saver)->finish(); !saved) {
      std::fprintf(stderr, "prsgd averager: %s\n", saved.error().message().c_str());
      status = status == 0 ? exit_failure : status;
    }
  }
  return status == 0 && signals_seen > 0 ? exit_stopped : status;
}

int run_worker(const worker_options& given) {
  const sigset_t signals = block_stop_signals();
  auto learned =
      learn_job("worker", given.output, given.liveness, given.security, given.model, given.given,
                given.averager_address, signals, std::chrono::milliseconds{given.join_timeout_ms}, "--join-timeout-ms");
  if (const int* status = std::get_if<int>(&learned)) {
    return *status;
  }
  joined_job& job = std::get<joined_job>(learned);
  const std::string& averager = job.averager;
  worker_options o = given;
  o.model = std::move(job.model);
  PRSGD_LOG(info, "worker") << "the job at " << averager << ": model " << o.model.model << " on " << o.model.dataset
                            << ", batch " << o.model.batch << ", lr " << o.model.lr << ", momentum " << o.model.momentum
                            << ", seed " << o.model.seed << ", wire dtype " << algorithms::to_string(job.spec.wire);
  auto data = load_job_data(o.model, data_need::train);
  if (!data) {
    std::fprintf(stderr, "prsgd worker: %s\n", data.error().message().c_str());
    return data_error_status(data.error());
  }
  auto fits = check_model_fits(o.model, *data);
  if (!fits) {
    std::fprintf(stderr, "prsgd worker: %s\n", fits.error().message().c_str());
    return exit_usage;
  }
  const auto incarnation = secure_random_u64();
  auto mapped = worker_config_from(o, *data, incarnation);
  if (!mapped) {
    std::fprintf(stderr, "prsgd worker: %s\n", mapped.error().message().c_str());
    return exit_usage;
  }
  actors::worker_actor_config cfg = std::move(*mapped);
  done_flag finished;
  std::atomic<bool> stopped_by_averager{false};
  std::string refusal;
  cfg.on_refused = [&](const std::string& reason) { refusal = reason; };
  std::string gave_up;
  cfg.on_gave_up = [&](const std::string& what) { gave_up = what; };
  cfg.on_finished = [&](bool by_averager) {
    stopped_by_averager = by_averager;
    finished.set();
  };

  auto tcfg = make_transport_config("worker-" + std::to_string(incarnation % 100000), o.liveness, o.security);
  if (!tcfg) {
    std::fprintf(stderr, "prsgd worker: %s\n", tcfg.error().message().c_str());
    return exit_usage;
  }
  if (auto limited = limit_frames_to_model(*tcfg, *fits); !limited) {
    std::fprintf(stderr, "prsgd worker: %s\n", limited.error().message().c_str());
    return exit_usage;
  }
  connect_options connect;
  if (!o.security.curve_server_key.empty()) {
    auto key = read_key_file(o.security.curve_server_key);
    if (!key) {
      std::fprintf(stderr, "prsgd worker: %s\n", key.error().message().c_str());
      return exit_usage;
    }
    connect.server_public_key = *key;
  }
  cfg.owner_connect = connect;  // a sharded job's owners share the averager's server key
  config sc;
  sc.threads = 1;
  sc.compute_threads = 1;  // one training thread per worker process
  actor_system system{sc};
  std::shared_ptr<transport> link;
  auto ref = actors::start_worker(system, std::move(cfg), zmq_factory(*tcfg), averager, &link, connect);
  if (!ref) {
    std::fprintf(stderr, "prsgd worker: cannot connect to %s: %s\n", averager.c_str(), ref.error().message().c_str());
    return exit_failure;
  }
  PRSGD_LOG(info, "worker") << "joining " << averager;
  int signals_seen = 0;
  int status = 0;
  while (!finished.wait_for(0ms)) {
    if (!ref->alive()) {
      std::fprintf(stderr, "prsgd worker: the worker actor stopped unexpectedly (see the log)\n");
      status = exit_failure;
      break;
    }
    if (const int sig = take_signal(signals, 200ms); sig != 0) {
      if (++signals_seen > 1) {
        status = 128 + sig;
        break;
      }
      PRSGD_LOG(info, "worker") << "signal " << sig << ": leaving the job";
      ref->tell(&actors::worker_actor::leave);
    }
  }
  if (status == 0) {
    std::this_thread::sleep_for(200ms);  // let LEAVE leave before the socket closes
  }
  link->stop();
  system.shutdown(5s);
  if (status == 0 && !refusal.empty()) {
    std::fprintf(stderr, "prsgd worker: the averager refused this worker: %s\n", refusal.c_str());
    return exit_failure;
  }
  if (status == 0 && !gave_up.empty()) {
    std::fprintf(stderr, "prsgd worker: %s at %s (--join-timeout-ms); giving up\n", gave_up.c_str(), averager.c_str());
    return exit_failure;
  }
  if (status == 0) {
    PRSGD_LOG(info, "worker") << (stopped_by_averager ? "job finished" : "left the job");
  }
  return status == 0 && !stopped_by_averager && signals_seen > 0 ? exit_stopped : status;
}

}  // namespace prsgd::cli
