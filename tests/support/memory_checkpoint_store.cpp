// SPDX-License-Identifier: Apache-2.0
#include "memory_checkpoint_store.hpp"

#include <algorithm>

#include "prsgd/common/check.hpp"

namespace prsgd::actors {

expected<void> memory_checkpoint_store::write(const checkpoint_state& s) {
  if (fail_writes_) {
    return fail(errc::io_error, "memory_checkpoint_store: writes fail (test)");
  }
  bytes_[s.round] = encode_checkpoint(s);
  ++writes_;
  return {};
}

std::optional<checkpoint_state> memory_checkpoint_store::read_newest() const {
  for (auto it = bytes_.rbegin(); it != bytes_.rend(); ++it) {
    if (auto s = decode_checkpoint(it->second)) {
      return std::move(s).value();
    }
  }
  return std::nullopt;
}

std::optional<checkpoint_state> memory_checkpoint_store::read(round_t round) const {
  auto it = bytes_.find(round);
  if (it == bytes_.end()) {
    return std::nullopt;
  }
  auto s = decode_checkpoint(it->second);
  if (!s) {
    return std::nullopt;
  }
  return std::move(s).value();
}

std::vector<round_t> memory_checkpoint_store::list() const {
  std::vector<round_t> rounds;
  for (auto it = bytes_.rbegin(); it != bytes_.rend(); ++it) {
    rounds.push_back(it->first);
  }
  return rounds;
}

expected<void> memory_checkpoint_store::prune(std::size_t keep) {
  while (bytes_.size() > std::max<std::size_t>(keep, 1)) {
    bytes_.erase(bytes_.begin());
  }
  return {};
}

expected<incarnation_t> memory_checkpoint_store::next_incarnation() {
  for (const auto& [round, bytes] : bytes_) {
    if (auto s = decode_checkpoint(bytes)) {
      incarnation_ = std::max(incarnation_, s->averager_incarnation);
    }
  }
  return ++incarnation_;
}

void memory_checkpoint_store::corrupt(round_t round) {
  auto it = bytes_.find(round);
  PRSGD_CHECK(it != bytes_.end() && !it->second.empty()) << "no checkpoint of round " << round;
  it->second.back() ^= 0x5a;
}

void memory_checkpoint_store::truncate(round_t round, std::size_t bytes) {
  auto it = bytes_.find(round);
  PRSGD_CHECK(it != bytes_.end()) << "no checkpoint of round " << round;
  it->second.resize(std::min(bytes, it->second.size()));
}

}  // namespace prsgd::actors
