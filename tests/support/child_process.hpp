// SPDX-License-Identifier: Apache-2.0
// Child processes for tests (library prsgd_test_support, test-only): starting a program with its output in
// files, waiting for it with a deadline scaled by time_scale(), killing and reaping what a test left running,
// and a child with piped stdin/stdout that announces its endpoint on its first line. Every test that starts a
// process goes through these; fork and exec are written here only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "files.hpp"
#include "time_scale.hpp"

namespace prsgd::test {

// ---- processes -------------------------------------------------------------------------------------------

/// Where a started program runs and writes.
struct spawn_options {
  std::filesystem::path cwd{};     // empty: the test's own
  std::string out{};               // file for stdout; empty: inherited
  std::string err{};               // file for stderr; empty: the same file as stdout
  bool append = false;             // append to the files instead of truncating them
  std::vector<std::string> env{};  // NAME=VALUE added to (or replacing in) the test's environment
};

/// Returns `exe` followed by `args`.
[[nodiscard]] std::vector<std::string> command(const std::string& exe, const std::vector<std::string>& args);

/// Returns the argv that runs `script` with /bin/sh -c.
[[nodiscard]] std::vector<std::string> shell(const std::string& script);

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

/// Runs `argv` to its end with its output discarded; returns its exit status (exit_code_of).
int run_quiet(const std::vector<std::string>& argv);

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
  run_result run(const std::vector<std::string>& argv, const spawn_options& options, std::chrono::milliseconds timeout);
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
