// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace prsgd::test {

/// Runs a child process with piped stdin/stdout; kills it (SIGKILL) in the destructor if still running.
/// Not thread-safe; used by one test thread.
class child_process {
 public:
  /// Starts `argv[0]` with `argv`; returns nullopt if fork/exec setup fails.
  static std::optional<child_process> start(const std::vector<std::string>& argv) {
    int in[2];
    int out[2];
    if (::pipe(in) != 0) {
      return std::nullopt;
    }
    if (::pipe(out) != 0) {
      ::close(in[0]);
      ::close(in[1]);
      return std::nullopt;
    }
    std::vector<char*> args;
    for (const auto& a : argv) {
      args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      return std::nullopt;
    }
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[0]);
      ::close(in[1]);
      ::close(out[0]);
      ::close(out[1]);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    child_process c;
    c.pid_ = pid;
    c.stdin_ = in[1];
    c.stdout_ = out[0];
    return c;
  }

  child_process(child_process&& o) noexcept : pid_(o.pid_), stdin_(o.stdin_), stdout_(o.stdout_) {
    o.pid_ = -1;
    o.stdin_ = -1;
    o.stdout_ = -1;
  }
  child_process& operator=(child_process&&) = delete;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process() { kill(); }

  /// Reads one line from the child's stdout, waiting at most `deadline`.
  std::optional<std::string> read_line(std::chrono::milliseconds deadline) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    std::string line;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return std::nullopt;
      }
      pollfd p{stdout_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        continue;
      }
      char c = 0;
      if (::read(stdout_, &c, 1) != 1) {
        return std::nullopt;
      }
      if (c == '\n') {
        return line;
      }
      line += c;
    }
  }

  /// Sends SIGKILL and reaps the child. Idempotent.
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (stdin_ >= 0) {
      ::close(stdin_);
      stdin_ = -1;
    }
    if (stdout_ >= 0) {
      ::close(stdout_);
      stdout_ = -1;
    }
  }

 private:
  child_process() = default;
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
};

}  // namespace prsgd::test
