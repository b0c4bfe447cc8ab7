// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/node.hpp"
#include "prsgd/runtime/remote.hpp"
#include "prsgd/transport/zmq_transport.hpp"

namespace prsgd::wire::testing {

/// Is the actor the remote-actor integration tests spawn and call across processes.
class counter final : public actor {
 public:
  explicit counter(int start) : value_(start) {}
  /// Adds `n` and returns the new value.
  int add(int n) { return value_ += n; }
  /// Returns the value.
  int get() const { return value_; }
  /// Records `n` (to check per-sender ordering of tells).
  void append(int n) { seen_.push_back(n); }
  /// Returns everything `append` recorded, in order.
  std::vector<int> seen() const { return seen_; }
  /// Returns `text` with `suffix` appended.
  std::string echo(std::string text, std::string suffix) const { return text + suffix; }
  /// Throws, so the actor fails (and stops: default restart policy).
  int crash() { throw std::runtime_error("counter asked to crash"); }
  /// Stops the actor normally.
  void stop() { quit(); }

 private:
  int value_;
  std::vector<int> seen_;
};

/// Registers the test actor types; every process of a test cluster calls this.
inline void register_test_types(remote_registry& reg) {
  reg.add<counter>("counter")
      .constructor<int>()
      .method("add", &counter::add)
      .method("get", &counter::get)
      .method("append", &counter::append)
      .method("seen", &counter::seen)
      .method("echo", &counter::echo)
      .method("crash", &counter::crash)
      .method("stop", &counter::stop);
}

/// Returns a transport factory making `zmq_transport`s.
inline transport_factory zmq_factory() {
  return [](transport_config c, transport_handlers h) -> expected<std::unique_ptr<transport>> {
    auto t = zmq_transport::make(std::move(c), std::move(h));
    if (!t) {
      return std::move(t).error();
    }
    return std::unique_ptr<transport>(std::move(*t));
  };
}

}  // namespace prsgd::wire::testing
