// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "prsgd/actors/protocol.hpp"
#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::cli {

/// Holds one connection to an averager's training endpoint for a client that is not a member: `prsgd status`
/// and `prsgd ctl` (STATUS, CONTROL), a worker or evaluator asking for the job's spec (SPEC) before it
/// joins, and an evaluator process (EVALUATOR_HELLO, EVALUATE, EVALUATION). It sends a request and waits for
/// the reply that carries the request's nonce (actors/PROTOCOL.md), or hands out what arrives (receive()).
/// Thread contract: ask() and receive() are called from one thread at a time; send() from any thread; the
/// transport's I/O thread only queues messages (under the mutex).
class averager_client {
 public:
  /// Connects to `endpoint` with the CURVE keys of `security` (a worker's, an evaluator's or an operator's).
  /// Messages larger than `max_frame_bytes` are refused by the transport. `liveness`: the transport's
  /// heartbeats for a client that stays connected (an evaluator); nullopt keeps the transport's defaults.
  [[nodiscard]] static expected<std::unique_ptr<averager_client>> connect(
      const std::string& endpoint, const security_options& security, std::size_t max_frame_bytes = std::size_t{8} << 20,
      const std::optional<liveness_options>& liveness = {});

  averager_client(const averager_client&) = delete;
  averager_client& operator=(const averager_client&) = delete;
  ~averager_client();

  /// Sends `request` (whose nonce is `nonce`) and waits up to `timeout` for the reply with that nonce. With
  /// `repeat`, the request is sent again every `repeat_every` until answered (for requests that change
  /// nothing: STATUS, SPEC); otherwise once. Returns timeout when no answer came in time.
  [[nodiscard]] expected<actors::to_operator> ask(const actors::any_msg& request, std::uint64_t nonce, bool repeat,
                                                  std::chrono::milliseconds timeout,
                                                  std::chrono::milliseconds repeat_every = std::chrono::seconds(1));

  /// Sends `msg` to the averager once.
  [[nodiscard]] expected<void> send(const multipart& msg);

  /// Returns the next message from the averager, waiting up to `wait` for one; nullopt when none came.
  [[nodiscard]] std::optional<multipart> receive(std::chrono::milliseconds wait);

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

/// Connects a `role` ("worker", "evaluator") to the averager at `endpoint` as connect() does. On failure prints
/// "prsgd <role>: cannot connect to ..." and returns the exit status: 2 for bad key files, 1 otherwise.
[[nodiscard]] std::variant<std::unique_ptr<averager_client>, int> connect_as(
    const char* role, const std::string& endpoint, const security_options& security,
    std::size_t max_frame_bytes = std::size_t{8} << 20, const std::optional<liveness_options>& liveness = {});

/// Asks the averager behind `client` for the job's spec (SPEC), repeating the question every heartbeat
/// interval until it is answered: the averager may not be up yet. Returns the reply, or the exit status: 3 when
/// a stop signal in `signals` came first, 1 when the connection fails, the averager answers something else, or
/// `give_up_after` (when > 0) passed without an answer (`limit_option` names the option that set it).
[[nodiscard]] std::variant<actors::spec_reply_msg, int> ask_job_spec(
    averager_client& client, const char* role, const liveness_options& liveness, const sigset_t& signals,
    std::chrono::milliseconds give_up_after = std::chrono::milliseconds{0}, const char* limit_option = "");

/// Holds the job a worker or evaluator takes part in, as the averager described it.
struct joined_job {
  /// The averager's endpoint (given, or found through the head).
  std::string averager;
  /// The averager's job spec (fingerprints, names, optimiser).
  actors::job_spec spec;
  /// The model options of the job: the spec's, which those given on the command line agree with.
  model_options model;
};

/// Does what a worker and an evaluator do before they load anything: prepares the process (log level,
/// plugins, and a --model / --dataset given here must be known), finds the averager (`where.averager`, or
/// through `where.head`), asks it for the job's spec and adopts it: the model options in `given` must agree with the
/// job, the job must not be `--model external`, and this process must know its model and data set. On failure prints
/// one line "prsgd <role>: ..." and returns the exit status (2 usage, 1 failure, 3 stopped by a signal).
/// `give_up_after` and `limit_option` are ask_job_spec's.
[[nodiscard]] std::variant<joined_job, int> learn_job(
    const char* role, const output_options& output, const liveness_options& liveness, const security_options& security,
    const model_options& model, const std::vector<std::string>& given, const averager_address_options& where,
    const sigset_t& signals, std::chrono::milliseconds give_up_after = std::chrono::milliseconds{0},
    const char* limit_option = "");

}  // namespace prsgd::cli
