// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"

/// The head's part in a job: the averager registers its worker endpoint there, and workers started with
/// `--head` look it up, so only the head's address has to be configured on every host.
namespace prsgd::cli {

/// Keeps the averager registered at the head while it lives; destroying it unregisters (best effort).
class head_registration {
 public:
  head_registration() = default;
  explicit head_registration(std::shared_ptr<void> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<void> state_;
};

/// Registers `averager_endpoint` (what workers connect to) as this job's averager at `head`. Returns
/// peer_unreachable / timeout when the head does not answer within `liveness.heartbeat_timeout_ms`.
[[nodiscard]] expected<head_registration> register_averager(const std::string& head,
                                                            const std::string& averager_endpoint,
                                                            const liveness_options& liveness);

/// Asks `head` for the averager's endpoint, retrying until one is registered or `timeout` passes.
[[nodiscard]] expected<std::string> lookup_averager(const std::string& head, const liveness_options& liveness,
                                                    std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace prsgd::cli
