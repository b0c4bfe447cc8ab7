// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

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

/// Starts every child (fork/exec, own process group, stdin from /dev/null, SIGTERM if the launcher dies),
/// forwards SIGINT/SIGTERM/SIGHUP to them (a second signal sends SIGKILL), waits for all, and reports.
/// Returns io_error if a log file cannot be created or a child cannot be started (the ones already started are
/// stopped first), invalid_argument for an empty spec list, empty argv or duplicate names.
/// @pre Called from the main thread while no other thread runs with SIGINT/SIGTERM/SIGCHLD unblocked: the
/// launcher blocks these signals while it runs and restores the mask afterwards.
[[nodiscard]] expected<cluster_report> launch_local_cluster(const launch_options& options,
                                                            const std::vector<child_spec>& children);

/// Returns a TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it back, close).
[[nodiscard]] expected<int> pick_free_tcp_port();

/// Holds the endpoints a local cluster uses.
struct local_endpoints {
  /// Averager's endpoint, e.g. tcp://127.0.0.1:43121.
  std::string averager;
  /// Head's endpoint ("" without --with-head).
  std::string head;
};

/// Returns the children `prsgd local` starts: [head,] averager, worker-0 .. worker-N-1, each running `exe` with
/// arguments derived from `o` (log level, plugins, model, schedule, heartbeats; per-worker id, shard, slowdown).
/// The averager writes metrics to `metrics_jsonl` ("" = none). Pure: starts nothing.
[[nodiscard]] std::vector<child_spec> build_local_cluster(const local_options& o, const std::string& exe,
                                                          const local_endpoints& endpoints,
                                                          const std::string& metrics_jsonl);

}  // namespace prsgd::cli
