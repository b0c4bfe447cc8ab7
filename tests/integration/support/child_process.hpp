// SPDX-License-Identifier: Apache-2.0
// What the integration tests share for the processes they start (library prsgd_test_support, test-only):
// a time scale for every wait, a scratch directory per test, starting a program with its output in files,
// waiting for it with a deadline, killing and reaping what a test left running, and a child with piped
// stdin/stdout that announces its endpoint on its first line.
//
// Time scale: every timeout given to these helpers is multiplied by time_scale(): the environment variable
// PRSGD_TEST_TIME_SCALE if set, else the build's default (CMake cache variable PRSGD_TEST_TIME_SCALE, 1 in
// normal builds, larger under ThreadSanitizer, where each `prsgd` process needs ~25 s to load Fashion-MNIST).
// Only deadlines are scaled: a timeout reached is a failure in every build, and no bound that a test
// asserts on a duration it measured is scaled by these helpers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace prsgd::test {

// ---- time ------------------------------------------------------------------------------------------------

/// The factor applied to every deadline (>= 1).
[[nodiscard]] double time_scale();

/// `d` times time_scale().
[[nodiscard]] std::chrono::milliseconds scaled(std::chrono::milliseconds d);

/// Polls `done` every `poll` until it returns true (true) or scaled(`timeout`) has passed (false; `done` is
/// asked one last time at the deadline).
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                std::chrono::milliseconds poll = std::chrono::milliseconds{20});

// ---- files -----------------------------------------------------------------------------------------------

/// The whole file ("" when it cannot be read).
[[nodiscard]] std::string read_file(const std::filesystem::path& path);

/// The non-empty lines of `text`.
[[nodiscard]] std::vector<std::string> lines_of(const std::string& text);

/// A fresh directory <tmp>/<prefix>-<pid>-<current test name>, removed on destruction; with
/// `keep_on_failure`, a failed test's directory is kept and named on stderr.
class scratch_dir {
 public:
  explicit scratch_dir(const std::string& prefix, bool keep_on_failure = false);
  ~scratch_dir();
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// The path of `name` inside, as a string.
  [[nodiscard]] std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
  bool keep_on_failure_;
};

// ---- processes -------------------------------------------------------------------------------------------

/// Where a started program runs and writes.
struct spawn_options {
  std::filesystem::path cwd{};     // empty: the test's own
  std::string out{};               // file for stdout; empty: inherited
  std::string err{};               // file for stderr; empty: the same file as stdout
  bool append = false;             // append to the files instead of truncating them
  std::vector<std::string> env{};  // NAME=VALUE added to (or replacing in) the test's environment
};

/// `exe` followed by `args`.
[[nodiscard]] std::vector<std::string> command(const std::string& exe, const std::vector<std::string>& args);

/// Starts argv[0] (a path) with `argv`; returns its pid, or -1 when fork fails. In the child, a failed chdir
/// exits 126 and a failed exec 127.
pid_t spawn(const std::vector<std::string>& argv, const spawn_options& options = {});

/// The exit status of a waitpid() status: the code, or 128 + the signal.
[[nodiscard]] int exit_code_of(int wait_status);

/// Waits for `pid` without a deadline; returns exit_code_of its status.
int wait_status(pid_t pid);

/// Waits at most scaled(`timeout`) for `pid`; returns exit_code_of its status, or nullopt.
std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout);

/// What a program that ran to its end (or its deadline) left behind.
struct run_result {
  int status = -1;  // -1 when it did not end in time
  std::string out;
  std::string err;
};

/// Runs `argv` to its end (no deadline but ctest's); out and err are read back from options.out/.err.
run_result run(const std::vector<std::string>& argv, const spawn_options& options);

/// The processes a test started: the ones still running are killed (SIGKILL) and reaped on destruction.
class process_group {
 public:
  process_group() = default;
  ~process_group() { kill_all(); }
  process_group(const process_group&) = delete;
  process_group& operator=(const process_group&) = delete;

  /// spawn(), remembered.
  pid_t start(const std::vector<std::string>& argv, const spawn_options& options = {});
  /// Waits at most scaled(`timeout`); a process that ended is forgotten.
  std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout);
  /// Runs `argv` for at most scaled(`timeout`): status -1 when it did not end (it stays in the group).
  run_result run(const std::vector<std::string>& argv, const spawn_options& options,
                 std::chrono::milliseconds timeout);
  /// SIGKILL and reap every remembered process.
  void kill_all();

 private:
  std::vector<pid_t> pids_;
};

/// Runs a child process with piped stdin/stdout; kills it (SIGKILL) in the destructor if still running.
/// Not thread-safe; used by one test thread.
class child_process {
 public:
  /// Starts `argv[0]` with `argv`; returns nullopt if fork/exec setup fails.
  static std::optional<child_process> start(const std::vector<std::string>& argv);

  child_process(child_process&& o) noexcept : pid_(o.pid_), stdin_(o.stdin_), stdout_(o.stdout_) {
    o.pid_ = -1;
    o.stdin_ = -1;
    o.stdout_ = -1;
  }
  child_process& operator=(child_process&&) = delete;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() { kill(); }

  /// Reads one line from the child's stdout, waiting at most scaled(`deadline`).
  std::optional<std::string> read_line(std::chrono::milliseconds deadline);

  /// Reads lines until one starts with `prefix` (true), EOF or scaled(`deadline`) (false).
  bool wait_line(const std::string& prefix, std::chrono::milliseconds deadline);

  /// The first line, "ENDPOINT <endpoint>", as the endpoint; nullopt for any other line, EOF or a timeout.
  std::optional<std::string> read_endpoint(std::chrono::milliseconds deadline);

  /// Sends SIGKILL and reaps the child. Idempotent.
  void kill();

 private:
  child_process() = default;
  std::optional<std::string> read_line_until(std::chrono::steady_clock::time_point end);
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
};

}  // namespace prsgd::test
