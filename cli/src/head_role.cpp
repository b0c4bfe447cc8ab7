// SPDX-License-Identifier: Apache-2.0
// The head role. Not wired yet: every entry point refuses with a clear message (no pretend service).
#include "head_role.hpp"

#include <cstdio>

#include "commands.hpp"

namespace prsgd::cli {

namespace {
error head_not_wired() {
  return error{errc::unsupported, "the head service is not available in this build yet; give workers --averager"};
}
}  // namespace

expected<head_registration> register_averager(const std::string&, const std::string&, const liveness_options&) {
  return unexpected{head_not_wired()};
}

expected<std::string> lookup_averager(const std::string&, const liveness_options&, std::chrono::milliseconds) {
  return unexpected{head_not_wired()};
}

int run_head(const head_options& o) {
  if (auto p = prepare_process(o.output); !p) {
    std::fprintf(stderr, "prsgd head: %s\n", p.error().message().c_str());
    return exit_usage;
  }
  std::fprintf(stderr, "prsgd head: %s\n", head_not_wired().message().c_str());
  return exit_failure;
}

}  // namespace prsgd::cli
