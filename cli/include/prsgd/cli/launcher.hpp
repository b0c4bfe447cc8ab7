// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "prsgd/cli/key_files.hpp"
#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::cli {

/// Says how a child's exit affects the others.
enum class child_role {
  /// When it exits, the job is over: the others get `grace` to finish, then SIGTERM. Its failure fails the launch.
  critical,
  /// Runs until it exits by itself (a worker).
  normal,
  /// Serves the others (a head): gets SIGTERM as soon as every non-service child has exited.
  service,
};

/// Describes one process to start.
struct child_spec {
  /// Short unique name; its output goes to `<log_dir>/<name>.log`.
  std::string name;
  /// argv[0] is the program (searched in PATH if it has no '/'), the rest its arguments.
  std::vector<std::string> argv;
  child_role role = child_role::normal;
  /// File the child writes its endpoint to once it listens ("" = none); see child_launcher::wait_for_endpoint.
  std::string endpoint_file{};
};

/// Describes how one child ended.
struct child_exit {
  std::string name;
  pid_t pid = -1;
  /// Exit status when it exited normally, else -1.
  int exit_code = -1;
  /// Signal that ended it, else 0.
  int signal = 0;
  /// True when the launcher had to send it SIGTERM/SIGKILL after a grace period.
  bool forced = false;
  child_role role = child_role::normal;

  /// Returns true when it exited with status 0.
  [[nodiscard]] bool ok() const noexcept { return exit_code == 0; }
  /// Returns "exited with status 3", "killed by signal 15 (Terminated)", ...
  [[nodiscard]] std::string describe() const;
};

/// Holds what the launch did.
struct cluster_report {
  /// Every child, in start order.
  std::vector<child_exit> children;
  /// SIGINT/SIGTERM/SIGHUP the launcher received and forwarded (0 = none).
  int received_signal = 0;
  /// Suggested exit status for the launcher: 128+received_signal if it was interrupted; else a failed critical
  /// child's status (128+signal if signalled); else 1 when no child is critical and a normal one failed; else 0.
  int exit_code = 0;
};

/// Tunes launch_local_cluster.
struct launch_options {
  /// Directory for `<name>.log` files (created); "" = children inherit stdout/stderr.
  std::string log_dir;
  /// Time the others get to exit after a critical child exits, before SIGTERM.
  std::chrono::milliseconds grace{10'000};
  /// Time between SIGTERM and SIGKILL.
  std::chrono::milliseconds kill_after{5'000};
  /// Called once after every child has started, with their pids in start order.
  std::function<void(const std::vector<pid_t>&)> on_started;
  /// Called about every 200 ms while children run (e.g. to refresh a progress line).
  std::function<void()> on_tick;
};

/// Starts child processes one at a time, forwards SIGINT/SIGTERM/SIGHUP to them (a second signal sends
/// SIGKILL), waits for all and reports: launch_local_cluster in steps, for a caller that starts some children
/// only once others are ready (`prsgd local` starts the workers after the averager has written its endpoint
/// file).
///
/// Not thread-safe: used by the main thread only, while no other thread runs with SIGINT/SIGTERM/SIGCHLD
/// unblocked. From construction until finish() (or destruction) these signals and SIGHUP are blocked in the
/// calling thread; the old mask is restored afterwards. Children still running when it is destroyed without
/// finish() are killed (SIGKILL) and reaped.
class child_launcher {
 public:
  explicit child_launcher(launch_options options);
  ~child_launcher();
  child_launcher(const child_launcher&) = delete;
  child_launcher& operator=(const child_launcher&) = delete;

  /// Starts `spec` (fork/exec, own process group, stdin from /dev/null, SIGTERM if the launcher dies).
  /// Returns invalid_argument for an empty argv or a name that is empty, has a '/' or was used before;
  /// io_error when the log directory or file cannot be created or the child cannot be started. On io_error
  /// every child already started is killed and reaped first.
  /// @pre finish() has not been called.
  [[nodiscard]] expected<pid_t> start(const child_spec& spec);

  /// Waits until the started child `name` has written `file` (see write_endpoint_file) and returns the
  /// endpoint in it. Fails with io_error when the child exits first (context: how it ended and, with a
  /// log directory, the last lines of its log), and with shutting_down when a stop signal arrives (it is
  /// forwarded to the children; finish() then waits for them).
  /// @pre `name` was started; finish() has not been called.
  [[nodiscard]] expected<std::string> wait_for_endpoint(const std::string& name, const std::string& file);

  /// Calls options.on_started with the pids of every child started so far, in start order.
  void started_all();

  /// Waits for every child (critical exit: grace, then SIGTERM, then SIGKILL; services stopped when the
  /// others are done), restores the signal mask and reports.
  [[nodiscard]] cluster_report finish();

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// Starts every child with a child_launcher, calls options.on_started, then waits for all and reports.
/// Returns invalid_argument for an empty spec list, empty argv or duplicate names (before starting
/// anything), io_error as child_launcher::start does.
/// @pre Called from the main thread while no other thread runs with SIGINT/SIGTERM/SIGCHLD unblocked.
[[nodiscard]] expected<cluster_report> launch_local_cluster(const launch_options& options,
                                                            const std::vector<child_spec>& children);

/// Writes `endpoint` and a newline to `path` atomically (to `path`.tmp, then renamed), so a reader sees the
/// whole line or no file. Returns io_error naming the file.
[[nodiscard]] expected<void> write_endpoint_file(const std::string& path, const std::string& endpoint);

/// Returns the endpoint in a file written by write_endpoint_file, or an empty optional while there is none.
[[nodiscard]] std::optional<std::string> read_endpoint_file(const std::string& path);

/// Holds the endpoints a local cluster uses.
struct local_endpoints {
  /// Averager's endpoint the workers join, e.g. tcp://127.0.0.1:43121.
  std::string averager;
  /// Head's endpoint ("" without --with-head).
  std::string head;
  /// What the averager binds ("" = `averager`), e.g. tcp://127.0.0.1:* for a port the system chooses.
  std::string averager_listen{};
  /// What the head binds ("" = `head`).
  std::string head_listen{};
};

/// Returns the operations options `prsgd local` gives its averager: o.operations, and with --http-bind but no
/// --http-url-file the URL file <o.log_dir>/averager.url, so the launcher can say where the dashboard is.
[[nodiscard]] operations_options local_operations(const local_options& o);

/// Returns the children `prsgd local` starts: head (with o.with_head), averager, worker-0 .. worker-N-1, each
/// running `exe` with arguments derived from `o` (log level, plugins, model, schedule, heartbeats; per-worker
/// id, shard, slowdown).
/// The averager writes metrics to `metrics_jsonl` ("" = none). Pure: starts nothing.
///
/// The head and the averager listen on `endpoints.head_listen` / `endpoints.averager_listen` and write the
/// endpoint they bound to `<o.log_dir>/head.endpoint` / `<o.log_dir>/averager.endpoint` (their
/// child_spec::endpoint_file); the averager and the workers are given `endpoints.head` and
/// `endpoints.averager`, so a caller that learns those from the files builds the list again once it knows them.
/// With `keys` (a key pair made for this job), every child runs with CURVE: each uses the job's key pair,
/// the head and the averager admit only that key, the workers and the averager take it as the server key; the
/// averager also admits o.operations.operator_keys, the clients that may steer it with `prsgd ctl`.
[[nodiscard]] std::vector<child_spec> build_local_cluster(const local_options& o, const std::string& exe,
                                                          const local_endpoints& endpoints,
                                                          const std::string& metrics_jsonl,
                                                          const key_file_paths& keys = {});

}  // namespace prsgd::cli
