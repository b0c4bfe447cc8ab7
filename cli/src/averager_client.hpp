// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "prsgd/actors/protocol.hpp"
#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::cli {

/// Holds one connection to an averager's training endpoint for a client that is not a member: `prsgd status`
/// and `prsgd ctl` (STATUS, CONTROL), and a worker asking for the job's spec (SPEC) before it joins. It sends
/// a request and waits for the reply that carries the request's nonce (actors/PROTOCOL.md).
/// Thread contract: ask() is called from one thread at a time; the transport's I/O thread only queues
/// replies (under the mutex).
class averager_client {
 public:
  /// Connects to `endpoint` with the CURVE keys of `security` (a worker's or an operator's).
  [[nodiscard]] static expected<std::unique_ptr<averager_client>> connect(const std::string& endpoint,
                                                                          const security_options& security);

  averager_client(const averager_client&) = delete;
  averager_client& operator=(const averager_client&) = delete;
  ~averager_client();

  /// Sends `request` (whose nonce is `nonce`) and waits up to `timeout` for the reply with that nonce. With
  /// `repeat`, the request is sent again every `repeat_every` until answered (for requests that change
  /// nothing: STATUS, SPEC); otherwise once. Returns timeout when no answer came in time.
  [[nodiscard]] expected<actors::to_operator> ask(const actors::any_msg& request, std::uint64_t nonce, bool repeat,
                                                  std::chrono::milliseconds timeout,
                                                  std::chrono::milliseconds repeat_every = std::chrono::seconds(1));

  /// Returns the endpoint this client is connected to.
  [[nodiscard]] const std::string& endpoint() const noexcept { return endpoint_; }

 private:
  averager_client() = default;
  void take(multipart msg);

  std::unique_ptr<transport> link_;
  peer_id peer_ = 0;
  std::string endpoint_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<multipart> inbox_;
};

}  // namespace prsgd::cli
