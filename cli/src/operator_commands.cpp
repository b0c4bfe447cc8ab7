// SPDX-License-Identifier: Apache-2.0
// `prsgd status` and `prsgd ctl`: a client of the averager's training endpoint that is not a member
// (averager_client.hpp). It connects (with CURVE keys as a worker's), sends one STATUS or CONTROL message
// and waits for the reply with the same nonce (actors/PROTOCOL.md, "Operator messages").
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "averager_client.hpp"
#include "commands.hpp"
#include "head_role.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/status.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/common/secure_random.hpp"

namespace prsgd::cli {
namespace {

using namespace std::chrono_literals;

expected<std::shared_ptr<const actors::job_status>> fetch_status(averager_client& client,
                                                                 std::chrono::milliseconds timeout) {
  const auto nonce = secure_random_u64();
  actors::status_request_msg req;
  req.incarnation = nonce;
  auto reply = client.ask(actors::any_msg{req}, nonce, true, timeout);
  PRSGD_TRY(reply);
  const auto* status = std::get_if<actors::status_reply_msg>(&*reply);
  if (status == nullptr || !status->status) {
    return fail(errc::protocol_error, "the averager answered STATUS with something else");
  }
  return status->status;
}

}  // namespace

int run_operator(const operator_options& o) {
  const char* name = o.steer ? "prsgd ctl" : "prsgd status";
  if (auto p = prepare_process(o.output); !p) {
    std::fprintf(stderr, "%s: %s\n", name, p.error().message().c_str());
    return exit_usage;
  }
  std::string endpoint = o.averager;
  if (endpoint.empty()) {
    auto found = lookup_averager(o.head, o.liveness, o.security, std::chrono::milliseconds{o.timeout_ms});
    if (!found) {
      std::fprintf(stderr, "%s: %s\n", name, found.error().message().c_str());
      return found.error().code == errc::not_found || found.error().code == errc::decode_failed ? exit_usage
                                                                                                : exit_failure;
    }
    endpoint = *found;
  }
  auto client = averager_client::connect(endpoint, o.security);
  if (!client) {
    std::fprintf(stderr, "%s: %s\n", name, client.error().message().c_str());
    return client.error().code == errc::not_found || client.error().code == errc::decode_failed ? exit_usage
                                                                                                : exit_failure;
  }
  const std::chrono::milliseconds timeout{o.timeout_ms};
  if (o.steer) {
    actors::control_msg req;
    req.incarnation = secure_random_u64();
    req.op = *actors::parse_control_op(o.action);  // validated with the options
    req.arg = o.arg;
    auto reply = (*client)->ask(actors::any_msg{req}, req.incarnation, false, timeout);
    if (!reply) {
      std::fprintf(stderr, "%s: %s\n", name, reply.error().message().c_str());
      return exit_failure;
    }
    const auto* r = std::get_if<actors::control_reply_msg>(&*reply);
    if (r == nullptr) {
      std::fprintf(stderr, "%s: the averager answered CONTROL with something else\n", name);
      return exit_failure;
    }
    std::printf("%s: %s\n", r->ok ? "ok" : "refused", r->text.c_str());
    return r->ok ? 0 : exit_failure;
  }
  const sigset_t signals = block_stop_signals();
  while (true) {
    auto status = fetch_status(**client, timeout);
    if (!status) {
      std::fprintf(stderr, "%s: %s\n", name, status.error().message().c_str());
      return exit_failure;
    }
    const std::string text = o.json ? actors::to_json(**status) + "\n" : actors::to_table(**status);
    if (o.watch_s > 0 && !o.json && ::isatty(::fileno(stdout)) != 0) {
      std::fputs("\033[H\033[2J", stdout);  // a terminal: redraw in place
    }
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    if (o.watch_s <= 0 || (*status)->state == "stopped") {
      return 0;
    }
    if (take_signal(signals, std::chrono::milliseconds{static_cast<long>(o.watch_s * 1000)}) != 0) {
      return 0;
    }
    if (!o.json) {
      std::fputs("\n", stdout);
    }
  }
}

}  // namespace prsgd::cli
