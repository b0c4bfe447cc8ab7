// SPDX-License-Identifier: Apache-2.0
// Runs an ops script with arguments and environment, capturing its output (shared by the ops tests).
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace prsgd::test {

struct script_result {
  int status = -1;
  std::string output;  // stdout and stderr interleaved
};

/// Starts `argv` with extra environment `env` (NAME=VALUE), output to `log`; returns the pid.
inline pid_t start_script(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& e : env) {
      ::putenv(const_cast<char*>(e.c_str()));  // NOLINT: the child execs right away
    }
    std::vector<char*> args;
    for (const auto& a : argv) {
      args.push_back(const_cast<char*>(a.c_str()));  // NOLINT
    }
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Waits for `pid` and returns its exit status (128+signal when killed).
inline int wait_status(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Runs `argv` to completion.
inline script_result run_script(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                                const std::string& log) {
  const pid_t pid = start_script(argv, env, log);
  script_result r;
  r.status = wait_status(pid);
  r.output = read_file(log);
  return r;
}

/// Returns the stdout of a shell command (for `ip netns list` and friends).
inline std::string shell_output(const std::string& cmd) {
  std::string out;
  if (std::FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) {
      out.append(buf, n);
    }
    ::pclose(p);
  }
  return out;
}

}  // namespace prsgd::test
