// SPDX-License-Identifier: Apache-2.0
#include "averager_client.hpp"

#include <algorithm>
#include <utility>

#include "prsgd/actors/codec.hpp"
#include "prsgd/cli/key_files.hpp"
#include "prsgd/common/secure_random.hpp"
#include "prsgd/transport/zmq_transport.hpp"

namespace prsgd::cli {

expected<std::unique_ptr<averager_client>> averager_client::connect(const std::string& endpoint,
                                                                    const security_options& security) {
  auto c = std::unique_ptr<averager_client>(new averager_client());
  transport_config cfg;
  cfg.node_name = "client-" + std::to_string(secure_random_u64() % 100000);
  cfg.max_frame_bytes = std::size_t{8} << 20;
  auto curve = load_curve(security);
  PRSGD_TRY(curve);
  cfg.curve = std::move(curve->own);
  transport_handlers h;
  auto* self = c.get();
  h.on_message = [self](peer_id, multipart msg) { self->take(std::move(msg)); };
  auto link = make_transport("zmq", cfg, std::move(h));
  PRSGD_TRY(link);
  c->link_ = std::move(*link);
  connect_options opts;
  opts.server_public_key = curve->server_public_key;
  auto peer = c->link_->connect(endpoint, opts);
  PRSGD_TRY(peer);
  c->peer_ = *peer;
  c->endpoint_ = endpoint;
  return c;
}

averager_client::~averager_client() {
  if (link_) {
    link_->stop();
  }
}

expected<actors::to_operator> averager_client::ask(const actors::any_msg& request, std::uint64_t nonce, bool repeat,
                                                   std::chrono::milliseconds timeout,
                                                   std::chrono::milliseconds repeat_every) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto sent = link_->send(peer_, actors::encode(request));
  PRSGD_TRY(sent);
  auto next_send = std::chrono::steady_clock::now() + repeat_every;
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
      return fail(errc::timeout,
                  "no answer from the averager at " + endpoint_ + " within " + std::to_string(timeout.count()) + " ms");
    }
    if (repeat && now >= next_send) {
      lock.unlock();
      (void)link_->send(peer_, actors::encode(request));
      lock.lock();
      next_send = now + repeat_every;
    }
    cv_.wait_until(lock, std::min(until, repeat ? next_send : until));
  }
}

void averager_client::take(multipart msg) {
  std::lock_guard lock(mu_);
  inbox_.push_back(std::move(msg));
  cv_.notify_all();
}

}  // namespace prsgd::cli
