// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/fault_injector.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "prsgd/common/log.hpp"

namespace prsgd {

fault_injector::fault_injector(std::uint64_t seed) : seed_(seed), rng_(seed) {
  PRSGD_LOG(debug, "fault") << describe();
}

fault_injector::fault_injector() : fault_injector(seed_from_env()) {}

std::uint64_t fault_injector::seed_from_env() {
  if (const char* text = std::getenv("PRSGD_FAULT_SEED"); text != nullptr) {
    std::uint64_t value = 0;
    const char* end = text + std::strlen(text);
    const auto [ptr, ec] = std::from_chars(text, end, value);
    if (ec == std::errc{} && ptr == end) {
      return value;
    }
  }
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32U) ^ rd();
}

std::string fault_injector::describe() const {
  return "fault_injector seed=" + std::to_string(seed_) + " (repeat with PRSGD_FAULT_SEED=" + std::to_string(seed_) +
         ")";
}

std::size_t fault_injector::add(fault_rule rule) {
  const mutex_lock lock(mutex_);
  rules_.push_back(armed_rule{std::move(rule), 0, 0});
  return rules_.size() - 1;
}

void fault_injector::clear() {
  const mutex_lock lock(mutex_);
  rules_.clear();
}

std::uint64_t fault_injector::triggered(std::size_t index) const {
  const mutex_lock lock(mutex_);
  return index < rules_.size() ? rules_[index].fired : 0;
}

fault_injector::decision fault_injector::decide(const fault_context& ctx) {
  const mutex_lock lock(mutex_);
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    auto& r = rules_[i];
    const auto& rule = r.rule;
    if (rule.stage != ctx.stage || (!rule.from.empty() && rule.from != ctx.from) ||
        (!rule.to.empty() && rule.to != ctx.to) || (rule.match && !rule.match(ctx))) {
      continue;
    }
    if (r.seen++ < rule.after || r.fired >= rule.times) {
      continue;
    }
    if (rule.probability < 1.0) {
      // 53 random bits -> [0, 1): identical on every platform, unlike std::uniform_real_distribution.
      const double u = static_cast<double>(rng_() >> 11U) * 0x1.0p-53;
      if (u >= rule.probability) {
        continue;
      }
    }
    ++r.fired;
    return decision{true, rule.action, rule.duration, i};
  }
  return decision{};
}

}  // namespace prsgd
