// SPDX-License-Identifier: Apache-2.0
// A whole job of real `prsgd` processes for integration tests: an averager that binds a port the system
// chooses and announces it (--endpoint-file), workers that join it, a head, each with its log file in one
// scratch directory, and everything still running killed when the test ends.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "files.hpp"

namespace prsgd::test {

/// Returns where the Fashion-MNIST files are: $PRSGD_FMNIST_DIR, else Debian's location (a role's
/// --data-dir: host-local, never part of the job spec).
inline std::string fmnist_dir() {
  const char* dir = std::getenv("PRSGD_FMNIST_DIR");
  return dir != nullptr && *dir != '\0' ? dir : "/usr/share/datasets/fashion-mnist";
}

/// A process that listens: its pid and the endpoint it bound.
struct listening {
  pid_t pid = -1;
  std::string endpoint{};
};

/// Runs `prsgd` processes for one test. Logs are <dir>/<name>.log (stdout and stderr, appended, so a
/// restarted process adds to its predecessor's); a failed test keeps the directory and names it.
/// Not thread-safe; used by one test thread.
class prsgd_job {
 public:
  /// Runs `binary` (the `prsgd` executable) with files under a scratch directory named after `prefix`.
  prsgd_job(std::string binary, const std::string& prefix);

  /// Returns the scratch directory.
  [[nodiscard]] const scratch_dir& dir() const noexcept { return dir_; }
  /// Returns the path of `name` in the scratch directory.
  [[nodiscard]] std::string path(const std::string& name) const { return dir_ / name; }
  /// Returns <dir>/<name>.log as it is now.
  [[nodiscard]] std::string log(const std::string& name) const;
  /// Returns the processes started so far (still running ones are killed when the job is destroyed).
  [[nodiscard]] process_group& processes() noexcept { return children_; }

  /// Starts `prsgd <args>` in the scratch directory, output appended to <dir>/<name>.log; returns its pid.
  pid_t start(const std::string& name, const std::vector<std::string>& args);

  /// Starts `prsgd <role> --listen <listen> --endpoint-file <dir>/<name>.endpoint <args>` and waits up to
  /// 60 s (scaled) for the endpoint it bound. Returns nullopt when the process exited first or did not
  /// listen in time (its log says why).
  std::optional<listening> start_listening(const std::string& name, const std::string& role,
                                           const std::vector<std::string>& args,
                                           const std::string& listen = "tcp://127.0.0.1:*");

  /// Returns start_listening(name, "averager", args, listen) and remembers the endpoint for start_worker.
  /// A restarted averager is given `listen` = averager_endpoint() to come back where the workers look.
  std::optional<listening> start_averager(const std::vector<std::string>& args, const std::string& name = "averager",
                                          const std::string& listen = "tcp://127.0.0.1:*");
  /// Returns the endpoint of the last averager started by start_averager ("" before).
  [[nodiscard]] const std::string& averager_endpoint() const noexcept { return averager_endpoint_; }

  /// Starts `prsgd worker --averager <averager_endpoint()> <args>` as worker-<id> (the averager assigns
  /// the member id and shard; `id` only names the process and its log).
  pid_t start_worker(int id, const std::vector<std::string>& args);

  /// Waits at most scaled(`timeout`) for `pid`; returns its exit status (128 + signal), or nullopt.
  std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout);

  /// Waits at most scaled(`timeout`) until <dir>/<name>.log contains `needle`.
  bool wait_for_log(const std::string& name, const std::string& needle, std::chrono::milliseconds timeout);

  /// Runs `prsgd <args>` for at most scaled(`timeout`), stdout and stderr in separate files; status -1 when
  /// it did not end (it is killed with the job).
  run_result run(const std::vector<std::string>& args, std::chrono::milliseconds timeout);

 private:
  std::string binary_;
  scratch_dir dir_;
  process_group children_;  // declared after dir_: killed before the directory goes
  std::string averager_endpoint_;
};

}  // namespace prsgd::test
