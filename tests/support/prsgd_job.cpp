// SPDX-License-Identifier: Apache-2.0
#include "prsgd_job.hpp"

#include <utility>

#include "time_scale.hpp"

namespace prsgd::test {

using namespace std::chrono_literals;

prsgd_job::prsgd_job(std::string binary, const std::string& prefix)
    : binary_(std::move(binary)), dir_(prefix, /*keep_on_failure=*/true) {}

std::string prsgd_job::log(const std::string& name) const { return read_file(dir_ / (name + ".log")); }

pid_t prsgd_job::start(const std::string& name, const std::vector<std::string>& args) {
  return children_.start(command(binary_, args), {.cwd = dir_.path(), .out = dir_ / (name + ".log"), .append = true});
}

std::optional<listening> prsgd_job::start_listening(const std::string& name, const std::string& role,
                                                    const std::vector<std::string>& args, const std::string& listen) {
  const std::string file = dir_ / (name + ".endpoint");
  std::error_code ec;
  std::filesystem::remove(file, ec);
  std::vector<std::string> full{role, "--listen", listen, "--endpoint-file", file};
  full.insert(full.end(), args.begin(), args.end());
  listening out;
  out.pid = start(name, full);
  // The file appears whole (written aside, then renamed) or not at all.
  wait_until([&] { return !(out.endpoint = read_file(file)).empty() || children_.wait_exit(out.pid, 0ms); }, 60s);
  if (out.endpoint.empty() || out.endpoint.back() != '\n') {
    return std::nullopt;
  }
  out.endpoint.pop_back();
  return out;
}

std::optional<listening> prsgd_job::start_averager(const std::vector<std::string>& args, const std::string& name,
                                                   const std::string& listen) {
  auto started = start_listening(name, "averager", args, listen);
  if (started) {
    averager_endpoint_ = started->endpoint;
  }
  return started;
}

pid_t prsgd_job::start_worker(int id, const std::vector<std::string>& args) {
  std::vector<std::string> full{"worker", "--averager", averager_endpoint_};
  full.insert(full.end(), args.begin(), args.end());
  return start("worker-" + std::to_string(id), full);
}

std::optional<int> prsgd_job::wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  return children_.wait_exit(pid, timeout);
}

bool prsgd_job::wait_for_log(const std::string& name, const std::string& needle, std::chrono::milliseconds timeout) {
  return wait_until([&] { return log(name).find(needle) != std::string::npos; }, timeout, 50ms);
}

run_result prsgd_job::run(const std::vector<std::string>& args, std::chrono::milliseconds timeout) {
  return children_.run(command(binary_, args),
                       {.cwd = dir_.path(), .out = path("stdout.txt"), .err = path("stderr.txt")}, timeout);
}

}  // namespace prsgd::test
