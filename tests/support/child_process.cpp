// SPDX-License-Identifier: Apache-2.0
#include "child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

extern char** environ;  // NOLINT: POSIX

namespace prsgd::test {

std::vector<std::string> command(const std::string& exe, const std::vector<std::string>& args) {
  std::vector<std::string> out{exe};
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

namespace {

// Starts argv[0]; in the child, `in_fd`/`out_fd` (when >= 0; opened with O_CLOEXEC) become stdin/stdout
// before the files of `options` are opened. Everything the child needs is made before fork: after it, only
// system calls.
pid_t start_process(const std::vector<std::string>& argv, const spawn_options& options, int in_fd, int out_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));  // NOLINT: execv's signature
  }
  args.push_back(nullptr);
  std::vector<char*> envp;
  if (!options.env.empty()) {
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      const std::size_t name_len = eq == nullptr ? std::strlen(*e) : static_cast<std::size_t>(eq - *e) + 1;
      const bool replaced = std::any_of(options.env.begin(), options.env.end(), [&](const std::string& v) {
        return v.compare(0, name_len, *e, name_len) == 0;
      });
      if (!replaced) {
        envp.push_back(*e);
      }
    }
    for (const auto& v : options.env) {
      envp.push_back(const_cast<char*>(v.c_str()));  // NOLINT: execve's signature
    }
    envp.push_back(nullptr);
  }
  const std::string cwd = options.cwd.string();
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (options.append ? O_APPEND : O_TRUNC);

  const pid_t pid = ::fork();
  if (pid != 0) {
    return pid;
  }
  if (in_fd >= 0) {
    ::dup2(in_fd, 0);
  }
  if (out_fd >= 0) {
    ::dup2(out_fd, 1);
  }
  if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) {
    ::_exit(126);
  }
  if (!options.out.empty()) {
    const int out = ::open(options.out.c_str(), flags, 0644);
    ::dup2(out, 1);
    if (options.err.empty()) {
      ::dup2(out, 2);
    }
  }
  if (!options.err.empty()) {
    ::dup2(::open(options.err.c_str(), flags, 0644), 2);
  }
  if (envp.empty()) {
    ::execv(args[0], args.data());
  } else {
    ::execve(args[0], args.data(), envp.data());
  }
  ::_exit(127);
}

}  // namespace

std::vector<std::string> shell(const std::string& script) { return {"/bin/sh", "-c", script}; }

pid_t spawn(const std::vector<std::string>& argv, const spawn_options& options) {
  return start_process(argv, options, -1, -1);
}

int exit_code_of(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

int wait_status(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return exit_code_of(status);
}

std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  std::optional<int> code;
  wait_until(
      [&] {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          code = exit_code_of(status);
        }
        return code.has_value();
      },
      timeout);
  return code;
}

run_result run(const std::vector<std::string>& argv, const spawn_options& options) {
  run_result r;
  r.status = wait_status(spawn(argv, options));
  r.out = read_file(options.out);
  r.err = read_file(options.err);
  return r;
}

int run_quiet(const std::vector<std::string>& argv) { return wait_status(spawn(argv, {.out = "/dev/null"})); }

pid_t process_group::start(const std::vector<std::string>& argv, const spawn_options& options) {
  const pid_t pid = spawn(argv, options);
  if (pid > 0) {
    pids_.push_back(pid);
  }
  return pid;
}

std::optional<int> process_group::wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  auto code = test::wait_exit(pid, timeout);
  if (code) {
    std::erase(pids_, pid);
  }
  return code;
}

run_result process_group::run(const std::vector<std::string>& argv, const spawn_options& options,
                              std::chrono::milliseconds timeout) {
  run_result r;
  r.status = wait_exit(start(argv, options), timeout).value_or(-1);
  r.out = read_file(options.out);
  r.err = read_file(options.err);
  return r;
}

void process_group::kill_all() {
  for (const pid_t pid : pids_) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  pids_.clear();
}

std::optional<child_process> child_process::start(const std::vector<std::string>& argv) {
  int in[2];
  int out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) {
    return std::nullopt;
  }
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return std::nullopt;
  }
  const pid_t pid = start_process(argv, {}, in[0], out[1]);
  ::close(in[0]);
  ::close(out[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    return std::nullopt;
  }
  child_process c;
  c.pid_ = pid;
  c.stdin_ = in[1];
  c.stdout_ = out[0];
  return c;
}

std::optional<std::string> child_process::read_line_until(std::chrono::steady_clock::time_point end) {
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

std::optional<std::string> child_process::read_line(std::chrono::milliseconds deadline) {
  return read_line_until(std::chrono::steady_clock::now() + scaled(deadline));
}

bool child_process::wait_line(const std::string& prefix, std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + scaled(deadline);
  while (auto line = read_line_until(end)) {
    if (line->starts_with(prefix)) {
      return true;
    }
  }
  return false;
}

std::optional<std::string> child_process::read_endpoint(std::chrono::milliseconds deadline) {
  const std::string prefix = "ENDPOINT ";
  auto line = read_line(deadline);
  if (!line || !line->starts_with(prefix)) {
    return std::nullopt;
  }
  return line->substr(prefix.size());
}

void child_process::kill() {
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

}  // namespace prsgd::test
