// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "prsgd/common/check.hpp"
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
    return fail(errc::io_error,
                "cannot start '" + spec.argv.front() + "' for " + spec.name + ": " + errno_text(child_errno));
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

struct child_launcher::state {
  launch_options options;
  sigset_t signals = launcher_signals();
  sigset_t old_mask{};
  bool finished = false;
  std::vector<running> kids;
  std::set<std::string> names;
  int received_signal = 0;
  enum class phase { running, grace, terminating, killing };
  phase ph = phase::running;
  clock_source::time_point deadline{};

  explicit state(launch_options o) : options(std::move(o)) { ::pthread_sigmask(SIG_BLOCK, &signals, &old_mask); }

  // Drops whatever arrived meanwhile so unblocking cannot kill us, then restores the caller's mask.
  void restore_mask() {
    const timespec zero{0, 0};
    while (::sigtimedwait(&signals, nullptr, &zero) > 0) {
    }
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  }

  void kill_all() {
    signal_alive(kids, SIGKILL, true, [](const running&) { return true; });
    for (auto& k : kids) {
      if (k.alive) {
        int status = 0;
        ::waitpid(k.info.pid, &status, 0);
        k.alive = false;
      }
    }
  }

  // Waits up to `wait` for a stop signal; the first is forwarded to every child, a second one kills them.
  void take_signal(std::chrono::nanoseconds wait) {
    const timespec ts{static_cast<time_t>(wait.count() / 1'000'000'000),
                      static_cast<long>(wait.count() % 1'000'000'000)};
    const int sig = ::sigtimedwait(&signals, nullptr, &ts);
    if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) {
      return;
    }
    const auto all = [](const running&) { return true; };
    if (received_signal == 0) {
      received_signal = sig;
      PRSGD_LOG(warn, "local") << "received " << ::strsignal(sig) << "; forwarding it to the children";
      signal_alive(kids, sig, false, all);
      ph = phase::terminating;
      deadline = steady_clock_source::instance().now() + options.kill_after;
    } else {
      PRSGD_LOG(warn, "local") << "second signal; killing the children";
      signal_alive(kids, SIGKILL, true, all);
      ph = phase::killing;
    }
  }

  // The last lines of a child's log, indented, or "" without a log directory.
  [[nodiscard]] std::string log_tail(const std::string& name) const {
    if (options.log_dir.empty()) {
      return {};
    }
    const std::string path = options.log_dir + "/" + name + ".log";
    std::ifstream in{path};
    std::deque<std::string> last;
    for (std::string line; std::getline(in, line);) {
      last.push_back(line);
      if (last.size() > 10) {
        last.pop_front();
      }
    }
    std::string out = "; the end of " + path + ":";
    for (const auto& line : last) {
      out += "\n  " + line;
    }
    return last.empty() ? "; " + path + " is empty" : out;
  }
};

child_launcher::child_launcher(launch_options options) : state_(std::make_unique<state>(std::move(options))) {}

child_launcher::~child_launcher() {
  if (!state_->finished) {
    state_->kill_all();
    state_->restore_mask();
  }
}

expected<pid_t> child_launcher::start(const child_spec& spec) {
  auto& st = *state_;
  PRSGD_CHECK(!st.finished) << "child_launcher::start after finish";
  if (spec.argv.empty() || spec.argv.front().empty()) {
    return fail(errc::invalid_argument, "child '" + spec.name + "' has no program");
  }
  if (spec.name.empty() || spec.name.find('/') != std::string::npos || st.names.contains(spec.name)) {
    return fail(errc::invalid_argument, "child names must be unique plain names (got '" + spec.name + "')");
  }
  if (!st.options.log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(st.options.log_dir, ec);
    if (ec) {
      st.kill_all();
      return fail(errc::io_error, "cannot create log directory '" + st.options.log_dir + "': " + ec.message());
    }
  }
  auto pid = start_child(spec, st.options, st.old_mask);
  if (!pid) {
    st.kill_all();
    return pid;
  }
  st.names.insert(spec.name);
  running r;
  r.info.name = spec.name;
  r.info.pid = *pid;
  r.info.role = spec.role;
  st.kids.push_back(std::move(r));
  PRSGD_LOG(info, "local") << "started " << spec.name << " (pid " << *pid << ")";
  return pid;
}

expected<std::string> child_launcher::wait_for_endpoint(const std::string& name, const std::string& file) {
  auto& st = *state_;
  PRSGD_CHECK(!st.finished) << "child_launcher::wait_for_endpoint after finish";
  const auto kid = std::find_if(st.kids.begin(), st.kids.end(), [&](const running& k) { return k.info.name == name; });
  PRSGD_CHECK(kid != st.kids.end()) << "wait_for_endpoint: no child named " << name;
  while (true) {
    if (auto endpoint = read_endpoint_file(file)) {
      return *endpoint;
    }
    if (st.received_signal != 0) {
      return fail(errc::shutting_down,
                  std::string{"stopped by "} + ::strsignal(st.received_signal) + " while " + name + " was starting");
    }
    reap(st.kids);
    if (!kid->alive) {
      return fail(errc::io_error, name + " " + kid->info.describe() + " before it listened" + st.log_tail(name));
    }
    st.take_signal(50ms);
    if (st.options.on_tick) {
      st.options.on_tick();
    }
  }
}

void child_launcher::started_all() {
  if (state_->options.on_started) {
    std::vector<pid_t> pids;
    for (const auto& k : state_->kids) {
      pids.push_back(k.info.pid);
    }
    state_->options.on_started(pids);
  }
}

cluster_report child_launcher::finish() {
  auto& st = *state_;
  auto& kids = st.kids;
  const auto& options = st.options;
  using phase = state::phase;
  auto& clk = steady_clock_source::instance();
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
    if (st.ph == phase::running) {
      for (const auto& k : kids) {
        if (!k.alive && k.info.role == child_role::critical) {
          st.ph = phase::grace;
          st.deadline = clk.now() + options.grace;
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
    if (st.ph != phase::running && st.ph != phase::killing && now >= st.deadline) {
      if (st.ph == phase::grace) {
        signal_alive(kids, SIGTERM, true, all);
        st.ph = phase::terminating;
        st.deadline = now + options.kill_after;
      } else {
        signal_alive(kids, SIGKILL, true, all);
        st.ph = phase::killing;
      }
      continue;
    }
    auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(200ms);
    if (st.ph == phase::grace || st.ph == phase::terminating) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::nanoseconds>(st.deadline - now));
    }
    st.take_signal(wait);
    if (options.on_tick) {
      options.on_tick();
    }
  }
  st.restore_mask();
  st.finished = true;

  cluster_report report;
  report.received_signal = st.received_signal;
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

expected<cluster_report> launch_local_cluster(const launch_options& options, const std::vector<child_spec>& children) {
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
  child_launcher launcher{options};
  for (const auto& spec : children) {
    PRSGD_TRY(launcher.start(spec));
  }
  launcher.started_all();
  return launcher.finish();
}

expected<void> write_endpoint_file(const std::string& path, const std::string& endpoint) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out{tmp, std::ios::trunc};
    out << endpoint << '\n';
    out.flush();
    if (!out) {
      return fail(errc::io_error, "cannot write the endpoint file '" + tmp + "'");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return fail(errc::io_error, "cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
  return {};
}

std::optional<std::string> read_endpoint_file(const std::string& path) {
  std::ifstream in{path};
  std::string line;
  if (!in || !std::getline(in, line) || line.empty()) {
    return std::nullopt;
  }
  return line;
}

namespace {

template <class T>
std::string text(const T& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

void add(std::vector<std::string>& a, const std::string& flag, const std::string& value) {
  a.push_back(flag);
  a.push_back(value);
}

void append(std::vector<std::string>& a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
}

void add_common(std::vector<std::string>& a, const local_options& o) {
  add(a, "--log-level", o.output.log_level);
  for (const auto& p : o.output.plugins) {
    add(a, "--plugin", std::filesystem::absolute(p).string());
  }
  append(a, to_arguments(o.liveness));
}

}  // namespace

operations_options local_operations(const local_options& o) {
  operations_options out = o.operations;
  if (!out.http_bind.empty() && out.http_url_file.empty()) {
    out.http_url_file = (std::filesystem::path{o.log_dir} / "averager.url").string();
  }
  return out;
}

std::vector<child_spec> build_local_cluster(const local_options& o, const std::string& exe,
                                            const local_endpoints& endpoints, const std::string& metrics_jsonl,
                                            const key_file_paths& keys) {
  // role: 's' serves (admits the job key), 'c' connects (the job key is the server's key).
  const auto add_keys = [&](std::vector<std::string>& a, char role) {
    if (keys.public_path.empty()) {
      return;
    }
    add(a, "--curve-public-key", keys.public_path);
    add(a, "--curve-secret-key", keys.secret_path);
    add(a, role == 's' ? "--curve-allow" : "--curve-server-key", keys.public_path);
  };
  const auto endpoint_file = [&](const std::string& name) {
    return std::filesystem::absolute(std::filesystem::path{o.log_dir} / (name + ".endpoint")).string();
  };
  const auto& head_listen = endpoints.head_listen.empty() ? endpoints.head : endpoints.head_listen;
  const auto& averager_listen = endpoints.averager_listen.empty() ? endpoints.averager : endpoints.averager_listen;
  std::vector<child_spec> out;
  if (o.with_head) {
    child_spec head{"head",
                    {exe, "head", "--listen", head_listen, "--progress", "off"},
                    child_role::service,
                    endpoint_file("head")};
    add(head.argv, "--endpoint-file", head.endpoint_file);
    add_common(head.argv, o);
    add_keys(head.argv, 's');
    out.push_back(std::move(head));
  }
  child_spec avg{"averager",
                 {exe, "averager", "--listen", averager_listen, "--progress", "off"},
                 child_role::critical,
                 endpoint_file("averager")};
  add(avg.argv, "--endpoint-file", avg.endpoint_file);
  add_common(avg.argv, o);
  add_keys(avg.argv, 's');
  if (o.with_head) {
    add(avg.argv, "--head", endpoints.head);
  }
  append(avg.argv, to_arguments(o.model));
  schedule_options schedule = o.schedule;
  if (schedule.min_workers == 0) {
    schedule.min_workers = o.workers;
  }
  if (schedule.topology == "sharded" && schedule.shards == 0) {
    schedule.shards = o.workers;  // one owner per worker, as a ring all-reduce would have
  }
  append(avg.argv, to_arguments(schedule));
  if (!metrics_jsonl.empty()) {
    add(avg.argv, "--metrics-jsonl", std::filesystem::absolute(metrics_jsonl).string());
  }
  if (o.output.metrics_port != 0) {
    add(avg.argv, "--metrics-port", text(o.output.metrics_port));
  }
  if (!o.output.metrics_bind.empty()) {
    add(avg.argv, "--metrics-bind", o.output.metrics_bind);
  }
  // The trained model: the averager writes it.
  append(avg.argv, to_arguments(o.save));
  // The dashboard and the operators. An operator connects with its own key, so the averager also admits it.
  append(avg.argv, to_arguments(local_operations(o)));
  if (!keys.public_path.empty()) {
    for (const auto& key : o.operations.operator_keys) {
      add(avg.argv, "--curve-allow", std::filesystem::absolute(key).string());
    }
  }
  out.push_back(std::move(avg));

  // Sharded averaging: the owners register with the averager, which tells the workers where they are.
  for (int k = 0; schedule.topology == "sharded" && k < schedule.shards; ++k) {
    const std::string shard = std::to_string(k) + "/" + std::to_string(schedule.shards);
    child_spec owner{"owner-" + std::to_string(k),
                     {exe, "averager", "--shard", shard, "--coordinator", endpoints.averager, "--listen",
                      "tcp://127.0.0.1:*", "--progress", "off"},
                     child_role::service};
    add_common(owner.argv, o);
    add_keys(owner.argv, 's');
    out.push_back(std::move(owner));
  }

  for (int i = 0; i < o.workers; ++i) {
    child_spec w{"worker-" + std::to_string(i), {exe, "worker", "--progress", "off"}, child_role::normal};
    if (!o.with_head) {
      add(w.argv, "--averager", endpoints.averager);
    } else {
      add(w.argv, "--head", endpoints.head);
    }
    int slow = 0;
    if (o.slowdown_ms.size() == 1) {
      slow = o.slowdown_ms.front();
    } else if (static_cast<std::size_t>(i) < o.slowdown_ms.size()) {
      slow = o.slowdown_ms[static_cast<std::size_t>(i)];
    }
    add(w.argv, "--slowdown-ms", text(slow));
    add_common(w.argv, o);
    add_keys(w.argv, 'c');
    append(w.argv, to_arguments(o.model));
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace prsgd::cli
