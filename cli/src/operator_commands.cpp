// SPDX-License-Identifier: Apache-2.0
// `prsgd status` and `prsgd ctl`: a client of the averager's training endpoint that is not a member. It
// connects (with CURVE keys as a worker's), sends one STATUS or CONTROL message and waits for the reply
// with the same nonce (actors/PROTOCOL.md, "Operator messages").
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "commands.hpp"
#include "head_role.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/status.hpp"
#include "prsgd/cli/key_files.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/common/secure_random.hpp"
#include "prsgd/transport/zmq_transport.hpp"

namespace prsgd::cli {
namespace {

using namespace std::chrono_literals;

/// One connection to an averager that asks and waits for the matching answer.
class operator_client {
 public:
  static expected<std::unique_ptr<operator_client>> connect(const operator_options& o) {
    auto c = std::unique_ptr<operator_client>(new operator_client());
    transport_config cfg;
    cfg.node_name = "operator-" + std::to_string(secure_random_u64() % 100000);
    cfg.max_frame_bytes = std::size_t{8} << 20;
    auto curve = load_curve(o.security);
    PRSGD_TRY(curve);
    cfg.curve = std::move(curve->own);
    transport_handlers h;
    auto* self = c.get();
    h.on_message = [self](peer_id, multipart msg) { self->take(std::move(msg)); };
    auto link = make_transport("zmq", cfg, std::move(h));
    PRSGD_TRY(link);
    c->link_ = std::move(*link);
    std::string endpoint = o.averager;
    if (endpoint.empty()) {
      auto found = lookup_averager(o.head, o.liveness, o.security, std::chrono::milliseconds{o.timeout_ms});
      PRSGD_TRY(found);
      endpoint = *found;
    }
    connect_options opts;
    opts.server_public_key = curve->server_public_key;
    auto peer = c->link_->connect(endpoint, opts);
    PRSGD_TRY(peer);
    c->peer_ = *peer;
    c->endpoint_ = endpoint;
    return c;
  }

  operator_client(const operator_client&) = delete;
  operator_client& operator=(const operator_client&) = delete;
  ~operator_client() {
    if (link_) {
      link_->stop();
    }
  }

  /// Sends `request` (its nonce is `nonce`) and waits up to `timeout` for the reply with that nonce. A
  /// STATUS request is repeated every second until answered (it changes nothing); a CONTROL goes once.
  expected<actors::to_operator> ask(const actors::any_msg& request, std::uint64_t nonce, bool repeat,
                                    std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    auto sent = link_->send(peer_, actors::encode(request));
    PRSGD_TRY(sent);
    auto next_send = std::chrono::steady_clock::now() + 1s;
    std::unique_lock lock(mu_);
    while (true) {
      while (!inbox_.empty()) {
        auto msg = std::move(inbox_.front());
        inbox_.pop_front();
        auto decoded = actors::decode_to_operator(msg);
        if (!decoded) {
          continue;
        }
        const auto reply_nonce = std::visit([](const auto& m) { return m.incarnation; }, *decoded);
        if (reply_nonce == nonce) {
          return std::move(*decoded);
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) {
        return fail(errc::timeout, "no answer from the averager at " + endpoint_ + " within " +
                                       std::to_string(timeout.count()) + " ms");
      }
      if (repeat && now >= next_send) {
        lock.unlock();
        (void)link_->send(peer_, actors::encode(request));
        lock.lock();
        next_send = now + 1s;
      }
      cv_.wait_until(lock, std::min(until, repeat ? next_send : until));
    }
  }

 private:
  operator_client() = default;

  void take(multipart msg) {
    std::lock_guard lock(mu_);
    inbox_.push_back(std::move(msg));
    cv_.notify_all();
  }

  std::unique_ptr<transport> link_;
  peer_id peer_ = 0;
  std::string endpoint_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<multipart> inbox_;
};

expected<std::shared_ptr<const actors::job_status>> fetch_status(operator_client& client,
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
  auto client = operator_client::connect(o);
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
