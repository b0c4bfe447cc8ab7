// SPDX-License-Identifier: Apache-2.0
// `prsgd head --listen ENDPOINT [--endpoint-file FILE]`: serves the head node (head_role.cpp) until SIGINT or
// SIGTERM, then exits 0.
// Both signals are taken by the main thread with block_stop_signals() / take_signal() (commands.hpp), as the
// other roles do.
#include <cstdio>

#include "commands.hpp"
#include "head_role.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::cli {

int run_head(const head_options& o) {
  const sigset_t signals = block_stop_signals();
  if (auto p = prepare_process(o.output); !p) {
    std::fprintf(stderr, "prsgd head: %s\n", p.error().message().c_str());
    return exit_usage;
  }
  auto server = head_server::start(o.listen, o.liveness, o.security);
  if (!server) {
    std::fprintf(stderr, "prsgd head: cannot serve on %s: %s\n", o.listen.c_str(), server.error().message().c_str());
    return exit_failure;
  }
  PRSGD_LOG(info, "head") << "serving at " << server->endpoint();
  if (!announce_endpoint("head", o.endpoint_file, server->endpoint())) {
    server->stop();
    return exit_failure;
  }
  int sig = 0;
  while (sig == 0) {
    sig = take_signal(signals, std::chrono::seconds{1});
  }
  PRSGD_LOG(info, "head") << "signal " << sig << ": stopping";
  server->stop();
  return 0;
}

}  // namespace prsgd::cli
