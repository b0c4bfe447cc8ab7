// SPDX-License-Identifier: Apache-2.0
// run_local and run_keygen, plus the prologue every role shares.
#include "commands.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "dashboard_server.hpp"
#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/model_spec.hpp"
#include "prsgd/cli/job_data.hpp"
#include "prsgd/cli/key_files.hpp"
#include "prsgd/cli/launcher.hpp"
#include "prsgd/cli/metrics_follow.hpp"
#include "prsgd/cli/progress.hpp"
#include "prsgd/common/log.hpp"

#ifdef PRSGD_CLI_HAVE_CURVE_KEYGEN
#include "prsgd/transport/zmq_transport.hpp"
#endif

namespace prsgd::cli {

namespace {

/// The stop signal taken by a thread that did not block it (see block_stop_signals); 0 = none. The handler
/// can run on any such thread (OpenBLAS starts its threads before the main thread blocks the signals), so
/// this is an atomic, not a `volatile sig_atomic_t`, which is only safe within one thread; a lock-free atomic
/// may be used in a signal handler.
std::atomic<int> g_caught_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void remember_stop_signal(int sig) { g_caught_signal.store(sig); }

/// Checks the dashboard and operator options of `prsgd local` before anything starts, so a bad one is one line
/// here instead of an averager that exits before it listens.
expected<void> check_local_operations(const operations_options& o) {
  for (const auto& file : o.operator_keys) {
    if (auto key = read_key_file(file); !key) {
      return fail(key.error().code, "--operator-key: " + key.error().context);
    }
  }
  if (!o.http_bind.empty()) {
    PRSGD_TRY(parse_http_bind(o.http_bind));
  }
  if (!o.http_token_file.empty()) {
    if (auto token = read_token_file(o.http_token_file); !token) {
      return fail(token.error().code, "--http-token-file: " + token.error().context);
    }
  }
  return {};
}

/// Writes a fresh key pair for one `prsgd local` job to LOG_DIR/keys/job.{public,secret} (the directory
/// mode 0700, the secret 0600), replacing the previous job's.
expected<key_file_paths> make_job_keys(const std::string& log_dir) {
  auto pair = generate_curve_keypair();
  if (!pair) {
    return fail(pair.error().code, "cannot make the job's CURVE keys: " + pair.error().context);
  }
  keygen_options k;
  k.out_dir = (std::filesystem::path{log_dir} / "keys").string();
  k.name = "job";
  k.force = true;
  std::error_code ec;
  std::filesystem::create_directories(k.out_dir, ec);
  std::filesystem::permissions(k.out_dir, std::filesystem::perms::owner_all, ec);
  if (ec) {
    return fail(errc::io_error, "cannot make the key directory '" + k.out_dir + "': " + ec.message());
  }
  auto paths = write_key_files(k, pair->public_key, pair->secret_key);
  PRSGD_TRY(paths);
  paths->public_path = std::filesystem::absolute(paths->public_path).string();
  paths->secret_path = std::filesystem::absolute(paths->secret_path).string();
  return paths;
}

}  // namespace

sigset_t block_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = remember_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

int take_signal(const sigset_t& set, std::chrono::milliseconds wait) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(wait.count() / 1000);
  ts.tv_nsec = static_cast<long>((wait.count() % 1000) * 1'000'000);
  const int sig = sigtimedwait(&set, nullptr, &ts);
  if (sig > 0) {
    return sig;
  }
  return g_caught_signal.exchange(0);
}

expected<std::vector<loaded_plugin>> prepare_process(const output_options& o, const std::string& model,
                                                     const std::string& dataset) {
  log::level lvl{};
  if (log::parse_level(o.log_level, lvl)) {
    log::set_level(lvl);
  }
  auto& registry = algorithms::model_registry::instance();
  auto plugins = load_plugins(o.plugins, &registry, &algorithms::dataset_registry::instance());
  if (!plugins) {
    return plugins;
  }
  if (!dataset.empty() && !algorithms::dataset_registry::instance().contains(dataset)) {
    return fail(errc::invalid_argument, unknown_dataset_message(dataset));
  }
  if (!model.empty() && algorithms::is_model_spec(model)) {
    if (auto spec = algorithms::parse_model_spec(model); !spec) {
      return unexpected{spec.error()};
    }
  }
  if (!model.empty() && !registry.contains(model)) {
    return fail(errc::invalid_argument, "unknown model '" + model + "' (registered: " + comma_list(registry.names()) +
                                            "; a --plugin can add more)");
  }
  return plugins;
}

expected<void> make_parent_directory(const std::string& file, const std::string& what) {
  const auto dir = std::filesystem::path{file}.parent_path();
  std::error_code ec;
  if (dir.empty() || std::filesystem::is_directory(dir, ec)) {
    return {};
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create the directory '" + dir.string() + "' of " + what + ": " + ec.message());
  }
  return {};
}

int data_error_status(const error& e) { return e.code == errc::io_error ? exit_failure : exit_usage; }

bool announce_endpoint(const std::string& role, const std::string& file, const std::string& endpoint) {
  if (file.empty()) {
    return true;
  }
  if (auto written = write_endpoint_file(file, endpoint); !written) {
    std::fprintf(stderr, "prsgd %s: %s\n", role.c_str(), written.error().message().c_str());
    return false;
  }
  return true;
}

std::optional<progress_reporter> make_progress_reporter(const std::string& mode) {
  if (mode == "off") {
    return std::nullopt;
  }
  if (mode == "plain") {
    return std::optional<progress_reporter>{std::in_place, stderr, progress_style::plain};
  }
  return std::optional<progress_reporter>{progress_reporter::for_stream(stderr)};
}

int run_local(const local_options& o) {
  // Load the plugins here too, so a bad one is refused before any process starts.
  auto plugins = prepare_process(o.output, o.model.model, resolve_dataset(o.model));
  if (!plugins) {
    std::fprintf(stderr, "prsgd local: %s\n", plugins.error().message().c_str());
    return exit_usage;
  }
  // And check the model against the data's shape and classes (headers and labels, no features), so a
  // mismatch is one line here instead of a failure in every child.
  auto shape = load_job_data(o.model, data_need::shape);
  if (!shape) {
    std::fprintf(stderr, "prsgd local: %s\n", shape.error().message().c_str());
    return data_error_status(shape.error());
  }
  if (auto fits = check_model_fits(o.model, *shape); !fits) {
    std::fprintf(stderr, "prsgd local: %s\n", fits.error().message().c_str());
    return exit_usage;
  }
  if (auto ops = check_local_operations(o.operations); !ops) {
    std::fprintf(stderr, "prsgd local: %s\n", ops.error().message().c_str());
    return exit_usage;
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    std::fprintf(stderr, "prsgd local: cannot find this program's path: %s\n", ec.message().c_str());
    return exit_failure;
  }
  // The head and the averager bind ports the system chooses (or --port) and write the endpoint they bound
  // to a file in the log directory; each next process starts once the one before it is listening.
  local_endpoints ep;
  ep.averager_listen = "tcp://127.0.0.1:" + (o.port == 0 ? std::string{"*"} : std::to_string(o.port));
  ep.head_listen = "tcp://127.0.0.1:*";
  const std::string metrics = o.output.metrics_jsonl.empty()
                                  ? (std::filesystem::path{o.log_dir} / "metrics.jsonl").string()
                                  : o.output.metrics_jsonl;
  // A job that may resume from --checkpoint-dir keeps its earlier rounds: the averager drops the lines of the
  // rounds it runs again and appends. Otherwise the old file goes, so the progress line never shows an older run.
  if (o.schedule.checkpoint_dir.empty() || o.schedule.fresh) {
    std::filesystem::remove(metrics, ec);
  }
  if (auto made = make_parent_directory(metrics, "--metrics-jsonl"); !made) {
    std::fprintf(stderr, "prsgd local: %s\n", made.error().message().c_str());
    return exit_failure;
  }
  // An ephemeral CURVE key pair for this job: only the processes started here hold it, so nobody else on
  // this host can join the job or talk to its head, even on loopback.
  auto keys = make_job_keys(o.log_dir);
  if (!keys) {
    std::fprintf(stderr, "prsgd local: %s\n", keys.error().message().c_str());
    return exit_failure;
  }
  auto children = build_local_cluster(o, exe.string(), ep, metrics, *keys);
  for (const auto& c : children) {
    if (!c.endpoint_file.empty()) {
      std::filesystem::remove(c.endpoint_file, ec);  // a file from an earlier run is not this child's
    }
  }
  // The dashboard's URL, once the averager serves it (an old file is an earlier run's).
  const std::string url_file = local_operations(o).http_url_file;
  if (!url_file.empty()) {
    std::filesystem::remove(url_file, ec);
  }
  bool url_announced = url_file.empty();

  auto reporter = make_progress_reporter(o.output.progress);
  metrics_follower follower{metrics};
  progress_snapshot snapshot;
  snapshot.total_rounds = o.schedule.rounds;
  double bytes_in = 0;
  double bytes_out = 0;
  std::optional<metrics_line> done_line;
  launch_options lo;
  lo.log_dir = o.log_dir;
  lo.grace = std::chrono::seconds{o.grace_s};
  lo.on_tick = [&] {
    if (!url_announced) {
      if (auto url = read_endpoint_file(url_file)) {
        url_announced = true;
        PRSGD_LOG(info, "local") << "dashboard on " << *url << " (the averager's endpoint is in "
                                 << (std::filesystem::path{o.log_dir} / "averager.endpoint").string() << ")";
      }
    }
    bool changed = false;
    for (const auto& line : follower.poll()) {
      if (auto m = parse_metrics_line(line)) {
        apply_metrics_line(snapshot, *m);
        bytes_in += m->bytes_in.value_or(0);
        bytes_out += m->bytes_out.value_or(0);
        if (m->done) {
          done_line = *m;
        }
        changed = true;
      }
    }
    if (changed && reporter) {
      reporter->update(snapshot);
    }
  };
  std::optional<error> not_ready;  // a child exited, or a stop signal came, before it listened
  cluster_report report;
  {
    child_launcher launcher{lo};
    for (std::size_t i = 0; i < children.size(); ++i) {
      const auto& c = children[i];
      if (auto started = launcher.start(c); !started) {
        // It could not be started at all; the launcher has stopped the ones it had started.
        if (reporter) {
          reporter->finish();
        }
        std::fprintf(stderr, "prsgd local: %s\n", started.error().message().c_str());
        return exit_failure;
      }
      if (c.endpoint_file.empty()) {
        continue;
      }
      auto endpoint = launcher.wait_for_endpoint(c.name, c.endpoint_file);
      if (!endpoint) {
        not_ready = endpoint.error();
        break;
      }
      (c.name == "head" ? ep.head : ep.averager) = *endpoint;
      PRSGD_LOG(info, "local") << c.name << " listens on " << *endpoint;
      children = build_local_cluster(o, exe.string(), ep, metrics, *keys);  // the ones after it now know where
    }
    if (!not_ready) {
      PRSGD_LOG(info, "local") << "started " << children.size() << " processes; averager on " << ep.averager
                               << ", logs in " << o.log_dir;
    }
    report = launcher.finish();
  }
  lo.on_tick();
  if (reporter) {
    reporter->finish();
  }
  if (not_ready) {
    std::fprintf(stderr, "prsgd local: %s\n", not_ready->context.c_str());
  }
  for (const auto& c : report.children) {
    std::fprintf(stderr, "prsgd local: %-10s %s (log: %s/%s.log)\n", c.name.c_str(), c.describe().c_str(),
                 o.log_dir.c_str(), c.name.c_str());
  }
  if (report.exit_code != 0) {
    std::fprintf(stderr, "prsgd local: failed (status %d)\n", report.exit_code);
  } else if (done_line) {
    char acc[32] = "not evaluated";
    if (done_line->test_acc) {
      std::snprintf(acc, sizeof acc, "%.2f%%", 100.0 * *done_line->test_acc);
    }
    std::fprintf(stderr,
                 "prsgd local: done: test accuracy %s after %ld rounds (%.2f epochs), %.1f MB to the averager, "
                 "%.1f MB from it, %.1f s (metrics: %s)\n",
                 acc, done_line->rounds.value_or(snapshot.round), snapshot.epoch, bytes_in / 1e6, bytes_out / 1e6,
                 done_line->wall_s.value_or(snapshot.elapsed_s), metrics.c_str());
  }
  // An averager that ends with status 0 before it listens found its job already finished in --checkpoint-dir
  // (its log says so, shown above): nothing went wrong.
  const bool averager_done = std::any_of(report.children.begin(), report.children.end(),
                                         [](const auto& c) { return c.name == "averager" && c.ok(); });
  return not_ready && report.exit_code == 0 && !averager_done ? exit_failure : report.exit_code;
}

int run_keygen(const keygen_options& o) {
#ifdef PRSGD_CLI_HAVE_CURVE_KEYGEN
  auto pair = prsgd::generate_curve_keypair();
  if (!pair) {
    std::fprintf(stderr, "prsgd keygen: %s\n", pair.error().message().c_str());
    return exit_failure;
  }
  auto written = write_key_files(o, pair->public_key, pair->secret_key);
  if (!written) {
    std::fprintf(stderr, "prsgd keygen: %s\n", written.error().message().c_str());
    return exit_failure;
  }
  std::printf("public key: %s\nsecret key: %s (keep it private)\n", written->public_path.c_str(),
              written->secret_path.c_str());
  return 0;
#else
  (void)o;
  std::fprintf(stderr, "prsgd keygen: this build has no CURVE key generator (prsgd::transport_zmq not built)\n");
  return exit_failure;
#endif
}

}  // namespace prsgd::cli
