// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::cli {
namespace {

using namespace std::chrono_literals;

std::string errno_text(int err) { return std::strerror(err); }

struct fd_guard {
  int fd = -1;
  fd_guard() = default;
  explicit fd_guard(int f) : fd(f) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    if (fd >= 0) {
      ::close(fd);
    }
  }
};

// One started child and what we know about it.
struct running {
  child_exit info;
  bool alive = true;
};

sigset_t launcher_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

// Runs in the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const std::vector<char*>& argv, int log_fd, int null_fd, int err_pipe,
                             const sigset_t& old_mask, pid_t parent) {
  ::setpgid(0, 0);  // Ctrl-C reaches only the launcher, which forwards it once
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) {
    ::_exit(127);  // the launcher died before prctl took effect
  }
  if (null_fd >= 0) {
    ::dup2(null_fd, STDIN_FILENO);
  }
  if (log_fd >= 0) {
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
  }
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  [[maybe_unused]] auto n = ::write(err_pipe, &err, sizeof err);
  ::_exit(127);
}

// Starts one child; returns its pid, or io_error when fork/exec fails.
expected<pid_t> start_child(const child_spec& spec, const launch_options& options, const sigset_t& old_mask) {
  fd_guard log_fd;
  if (!options.log_dir.empty()) {
    const std::string path = options.log_dir + "/" + spec.name + ".log";
    log_fd.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd.fd < 0) {
      return fail(errc::io_error, "cannot create log file '" + path + "': " + errno_text(errno));
    }
  }
  fd_guard null_fd{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return fail(errc::io_error, "pipe2 failed: " + errno_text(errno));
  }
  fd_guard read_end{pipe_fds[0]};
  fd_guard write_end{pipe_fds[1]};
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& a : spec.argv) {
    argv.push_back(const_cast<char*>(a.c_str()));  // NOLINT: execvp's historical signature
  }
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    return fail(errc::io_error, "fork failed: " + errno_text(errno));
  }
  if (pid == 0) {
    exec_child(argv, log_fd.fd, null_fd.fd, write_end.fd, old_mask, parent);
  }
  // Also set the group from here, so a signal sent right after fork finds it (the usual double setpgid).
  ::setpgid(pid, pid);
  ::close(write_end.fd);
  write_end.fd = -1;
  int child_errno = 0;
  ssize_t n = 0;
  do {
    n = ::read(read_end.fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return fail(errc::io_error, "cannot start '" + spec.argv.front() + "' for " + spec.name + ": " +
                                    errno_text(child_errno));
  }
  return pid;
}

void signal_alive(std::vector<running>& kids, int sig, bool mark_forced,
                  const std::function<bool(const running&)>& which) {
  for (auto& k : kids) {
    if (k.alive && which(k)) {
      ::kill(k.info.pid, sig);
      if (mark_forced) {
        k.info.forced = true;
      }
    }
  }
}

void reap(std::vector<running>& kids) {
  for (auto& k : kids) {
    if (!k.alive) {
      continue;
    }
    int status = 0;
    const pid_t r = ::waitpid(k.info.pid, &status, WNOHANG);
    if (r == k.info.pid) {
      k.alive = false;
      if (WIFEXITED(status)) {
        k.info.exit_code = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        k.info.signal = WTERMSIG(status);
      }
      PRSGD_LOG(info, "local") << k.info.name << " (pid " << k.info.pid << ") " << k.info.describe();
    } else if (r < 0 && errno == ECHILD) {
      k.alive = false;  // reaped elsewhere; nothing more to learn
    }
  }
}

}  // namespace

std::string child_exit::describe() const {
  std::ostringstream out;
  if (exit_code >= 0) {
    out << "exited with status " << exit_code;
  } else if (signal != 0) {
    out << "killed by signal " << signal << " (" << ::strsignal(signal) << ")";
  } else {
    out << "ended in an unknown way";
  }
  if (forced) {
    out << " after the launcher stopped it";
  }
  return out.str();
}

expected<cluster_report> launch_local_cluster(const launch_options& options,
                                              const std::vector<child_spec>& children) {
  if (children.empty()) {
    return fail(errc::invalid_argument, "no children to launch");
  }
  std::set<std::string> names;
  for (const auto& c : children) {
    if (c.argv.empty() || c.argv.front().empty()) {
      return fail(errc::invalid_argument, "child '" + c.name + "' has no program");
    }
    if (c.name.empty() || c.name.find('/') != std::string::npos || !names.insert(c.name).second) {
      return fail(errc::invalid_argument, "child names must be unique plain names (got '" + c.name + "')");
    }
  }
  if (!options.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.log_dir, ec);
    if (ec) {
      return fail(errc::io_error, "cannot create log directory '" + options.log_dir + "': " + ec.message());
    }
  }

  const sigset_t set = launcher_signals();
  sigset_t old_mask;
  ::pthread_sigmask(SIG_BLOCK, &set, &old_mask);

  std::vector<running> kids;
  kids.reserve(children.size());
  cluster_report report;
  for (const auto& spec : children) {
    auto pid = start_child(spec, options, old_mask);
    if (!pid) {
      signal_alive(kids, SIGKILL, true, [](const running&) { return true; });
      for (auto& k : kids) {
        int status = 0;
        ::waitpid(k.info.pid, &status, 0);
      }
      // Drop whatever arrived meanwhile so unblocking cannot kill us.
      const timespec zero{0, 0};
      while (::sigtimedwait(&set, nullptr, &zero) > 0) {
      }
      ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
      return prsgd::unexpected{pid.error()};
    }
    running r;
    r.info.name = spec.name;
    r.info.pid = *pid;
    r.info.role = spec.role;
    kids.push_back(std::move(r));
    PRSGD_LOG(info, "local") << "started " << spec.name << " (pid " << *pid << ")";
  }
  if (options.on_started) {
    std::vector<pid_t> pids;
    for (const auto& k : kids) {
      pids.push_back(k.info.pid);
    }
    options.on_started(pids);
  }

  enum class phase { running, grace, terminating, killing };
  phase ph = phase::running;
  auto& clk = steady_clock::instance();
  clock::time_point deadline{};
  const auto any_alive = [&](const std::function<bool(const running&)>& which) {
    for (const auto& k : kids) {
      if (k.alive && which(k)) {
        return true;
      }
    }
    return false;
  };
  const auto all = [](const running&) { return true; };
  const auto is_service = [](const running& k) { return k.info.role == child_role::service; };
  const auto not_service = [](const running& k) { return k.info.role != child_role::service; };
  bool services_stopped = false;

  while (true) {
    reap(kids);
    if (!any_alive(all)) {
      break;
    }
    if (ph == phase::running) {
      for (const auto& k : kids) {
        if (!k.alive && k.info.role == child_role::critical) {
          ph = phase::grace;
          deadline = clk.now() + options.grace;
          PRSGD_LOG(info, "local") << k.info.name << " has ended; the others get "
                                   << std::chrono::duration_cast<std::chrono::seconds>(options.grace).count()
                                   << " s to exit";
          break;
        }
      }
    }
    if (!services_stopped && !any_alive(not_service)) {
      services_stopped = true;
      signal_alive(kids, SIGTERM, false, is_service);
    }
    const auto now = clk.now();
    if (ph != phase::running && ph != phase::killing && now >= deadline) {
      if (ph == phase::grace) {
        signal_alive(kids, SIGTERM, true, all);
        ph = phase::terminating;
        deadline = now + options.kill_after;
      } else {
        signal_alive(kids, SIGKILL, true, all);
        ph = phase::killing;
      }
      continue;
    }
    auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(200ms);
    if (ph == phase::grace || ph == phase::terminating) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now));
    }
    const timespec ts{static_cast<time_t>(wait.count() / 1'000'000'000), static_cast<long>(wait.count() % 1'000'000'000)};
    const int sig = ::sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (report.received_signal == 0) {
        report.received_signal = sig;
        PRSGD_LOG(warn, "local") << "received " << ::strsignal(sig) << "; forwarding it to the children";
        signal_alive(kids, sig, false, all);
        ph = phase::terminating;
        deadline = clk.now() + options.kill_after;
      } else {
        PRSGD_LOG(warn, "local") << "second signal; killing the children";
        signal_alive(kids, SIGKILL, true, all);
        ph = phase::killing;
      }
    }
    if (options.on_tick) {
      options.on_tick();
    }
  }

  const timespec zero{0, 0};
  while (::sigtimedwait(&set, nullptr, &zero) > 0) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);

  bool any_critical = false;
  int first_failure = 0;
  for (const auto& k : kids) {
    report.children.push_back(k.info);
    const int code = k.info.exit_code >= 0 ? k.info.exit_code : 128 + k.info.signal;
    if (k.info.role == child_role::critical) {
      any_critical = true;
      if (code != 0 && report.exit_code == 0) {
        report.exit_code = code;
      }
    } else if (k.info.role == child_role::normal && code != 0 && first_failure == 0) {
      first_failure = 1;
    }
  }
  if (!any_critical && report.exit_code == 0) {
    report.exit_code = first_failure;
  }
  if (report.received_signal != 0) {
    report.exit_code = 128 + report.received_signal;  // like a shell: interrupted jobs end in 130/143
  }
  return report;
}

expected<int> pick_free_tcp_port() {
  fd_guard s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) {
    return fail(errc::io_error, "socket failed: " + errno_text(errno));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {  // NOLINT: sockets API
    return fail(errc::io_error, "bind 127.0.0.1:0 failed: " + errno_text(errno));
  }
  socklen_t len = sizeof addr;
  if (::getsockname(s.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {  // NOLINT: sockets API
    return fail(errc::io_error, "getsockname failed: " + errno_text(errno));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

namespace {

template <class T>
std::string text(const T& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Shortest text that reads back as the same double (0.05 -> "0.05").
std::string text(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : std::to_string(v);
}

void add(std::vector<std::string>& a, const std::string& flag, const std::string& value) {
  a.push_back(flag);
  a.push_back(value);
}

void add_common(std::vector<std::string>& a, const local_options& o) {
  add(a, "--log-level", o.output.log_level);
  for (const auto& p : o.output.plugins) {
    add(a, "--plugin", std::filesystem::absolute(p).string());
  }
  add(a, "--heartbeat-ms", text(o.liveness.heartbeat_ms));
  add(a, "--heartbeat-timeout-ms", text(o.liveness.heartbeat_timeout_ms));
}

void add_model(std::vector<std::string>& a, const model_options& m) {
  add(a, "--model", m.model);
  add(a, "--dataset", m.dataset);
  if (!m.data_dir.empty()) {
    add(a, "--data-dir", std::filesystem::absolute(m.data_dir).string());
  }
  for (const auto& kv : m.data_options) {
    add(a, "--data-option", kv);
  }
  add(a, "--batch", text(m.batch));
  add(a, "--lr", text(m.lr));
  add(a, "--momentum", text(m.momentum));
  add(a, "--momentum-on-restart", m.momentum_on_restart);
  add(a, "--seed", text(m.seed));
  if (m.non_iid) {
    a.emplace_back("--non-iid");
    add(a, "--dirichlet-alpha", text(m.dirichlet_alpha));
  }
}

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) {
    out += (out.empty() ? "" : ",") + std::to_string(x);
  }
  return out;
}

}  // namespace

std::vector<child_spec> build_local_cluster(const local_options& o, const std::string& exe,
                                            const local_endpoints& endpoints, const std::string& metrics_jsonl) {
  std::vector<child_spec> out;
  if (!endpoints.head.empty()) {
    child_spec head{"head", {exe, "head", "--listen", endpoints.head, "--progress", "off"}, child_role::service};
    add_common(head.argv, o);
    out.push_back(std::move(head));
  }
  child_spec avg{"averager", {exe, "averager", "--listen", endpoints.averager, "--progress", "off"},
                 child_role::critical};
  add_common(avg.argv, o);
  if (!endpoints.head.empty()) {
    add(avg.argv, "--head", endpoints.head);
  }
  add_model(avg.argv, o.model);
  const auto& s = o.schedule;
  add(avg.argv, "--mode", s.mode);
  add(avg.argv, "--epochs", text(s.epochs));
  add(avg.argv, "--rounds", text(s.rounds));
  add(avg.argv, "--interval", text(s.interval));
  if (!s.intervals.empty()) {
    add(avg.argv, "--intervals", join(s.intervals));
  }
  add(avg.argv, "--interval-policy", s.interval_policy);
  add(avg.argv, "--averaging", s.averaging);
  add(avg.argv, "--deadline", s.deadline);
  add(avg.argv, "--deadline-ms", text(s.deadline_ms));
  add(avg.argv, "--deadline-mad-k", text(s.deadline_mad_k));
  add(avg.argv, "--quorum", text(s.quorum));
  add(avg.argv, "--step-size", s.step_size);
  add(avg.argv, "--warmup-rounds", text(s.warmup_rounds));
  add(avg.argv, "--outer", s.outer);
  add(avg.argv, "--outer-lr", text(s.outer_lr));
  add(avg.argv, "--outer-momentum", text(s.outer_momentum));
  add(avg.argv, "--eval-every", text(s.eval_every));
  add(avg.argv, "--checkpoint-every", text(s.checkpoint_every));
  if (!s.checkpoint_dir.empty()) {
    add(avg.argv, "--checkpoint-dir", std::filesystem::absolute(s.checkpoint_dir).string());
  }
  add(avg.argv, "--min-workers", text(s.min_workers == 0 ? o.workers : s.min_workers));
  if (!metrics_jsonl.empty()) {
    add(avg.argv, "--metrics-jsonl", std::filesystem::absolute(metrics_jsonl).string());
  }
  if (o.output.metrics_port != 0) {
    add(avg.argv, "--metrics-port", text(o.output.metrics_port));
  }
  out.push_back(std::move(avg));

  for (int i = 0; i < o.workers; ++i) {
    child_spec w{"worker-" + std::to_string(i), {exe, "worker", "--progress", "off"}, child_role::normal};
    if (endpoints.head.empty()) {
      add(w.argv, "--averager", endpoints.averager);
    } else {
      add(w.argv, "--head", endpoints.head);
    }
    add(w.argv, "--worker-id", text(i));
    add(w.argv, "--num-workers", text(o.workers));
    int slow = 0;
    if (o.slowdown_ms.size() == 1) {
      slow = o.slowdown_ms.front();
    } else if (static_cast<std::size_t>(i) < o.slowdown_ms.size()) {
      slow = o.slowdown_ms[static_cast<std::size_t>(i)];
    }
    add(w.argv, "--slowdown-ms", text(slow));
    add_common(w.argv, o);
    add_model(w.argv, o.model);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace prsgd::cli
