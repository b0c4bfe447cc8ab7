// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/sample_pool.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>

#include "data/rng.hpp"

namespace prsgd::algorithms {
namespace {

// Stream tags of the pool's draws (sharding.cpp uses 1..5).
constexpr std::uint64_t tag_pool_epoch = 6;
constexpr std::uint64_t tag_round_order = 7;

}  // namespace

expected<sample_pool> sample_pool::make(const pool_config& config) {
  if (config.samples == 0 || config.block == 0) {
    return fail(errc::invalid_argument, "sample pool: the data set and the block must hold at least one sample");
  }
  return sample_pool{config};
}

expected<sample_pool> sample_pool::restore(const pool_config& config, const pool_state& state) {
  auto pool = make(config);
  PRSGD_TRY(pool);
  const auto n = config.samples;
  const auto bad = [](const std::string& why) { return fail(errc::invalid_argument, "sample pool state: " + why); };
  if (state.epochs_done > state.next_epoch || (config.max_epochs > 0 && state.next_epoch > config.max_epochs)) {
    return bad("epoch counts " + std::to_string(state.epochs_done) + " done, next " + std::to_string(state.next_epoch) +
               " do not fit the job");
  }
  for (const auto& e : state.open) {
    if (e.epoch >= state.next_epoch || pool->open_.contains(e.epoch)) {
      return bad("epoch " + std::to_string(e.epoch) + " is not a distinct opened epoch");
    }
    std::uint64_t held = 0;
    for (const auto& [b, en] : e.available) {
      if (b >= en || en > n) {
        return bad("range [" + std::to_string(b) + ", " + std::to_string(en) + ") is outside the data set of " +
                   std::to_string(n));
      }
      held += en - b;
    }
    if (e.consumed + held > n || e.consumed >= n) {
      return bad("epoch " + std::to_string(e.epoch) + " counts more samples than the data set has");
    }
    auto& entry = pool->open_[e.epoch];
    entry.consumed = e.consumed;
    entry.available.assign(e.available.rbegin(), e.available.rend());
  }
  pool->next_epoch_ = state.next_epoch;
  pool->epochs_done_ = state.epochs_done;
  return pool;
}

bool sample_pool::open_next() {
  if (config_.max_epochs > 0 && next_epoch_ >= config_.max_epochs) {
    return false;
  }
  const std::uint64_t blocks = (config_.samples + config_.block - 1) / config_.block;
  std::vector<std::uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), std::uint64_t{0});
  detail::rng gen(detail::derive_seed(config_.seed, tag_pool_epoch, next_epoch_));
  gen.shuffle(std::span<std::uint64_t>{order});
  auto& e = open_[next_epoch_++];
  e.available.reserve(blocks);
  // Stored back to front: back() is handed out first.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const std::uint64_t b = *it * config_.block;
    e.available.emplace_back(b, std::min(b + config_.block, config_.samples));
  }
  return true;
}

std::vector<sample_range> sample_pool::take(std::uint64_t count, std::size_t max_ranges) {
  std::vector<sample_range> out;
  while (count > 0) {
    auto it = std::find_if(open_.begin(), open_.end(), [](const auto& kv) { return !kv.second.available.empty(); });
    if (it == open_.end()) {
      if (!open_next()) {
        break;
      }
      continue;
    }
    auto& [b, e] = it->second.available.back();
    const std::uint64_t n = std::min(count, e - b);
    if (!out.empty() && out.back().epoch == it->first && out.back().end == b) {
      out.back().end += n;  // adjacent blocks make one range
    } else if (out.size() < max_ranges) {
      out.push_back({it->first, b, b + n});
    } else {
      break;
    }
    if (n == e - b) {
      it->second.available.pop_back();
    } else {
      b += n;
    }
    count -= n;
  }
  return out;
}

void sample_pool::give_back(std::span<const sample_range> ranges) {
  // The first range given back is handed out first: push in reverse.
  for (auto r = ranges.rbegin(); r != ranges.rend(); ++r) {
    if (r->begin >= r->end) {
      continue;
    }
    auto it = open_.find(r->epoch);
    if (it == open_.end()) {
      continue;  // an epoch this pool never opened (or finished): nothing to give back to
    }
    it->second.available.emplace_back(r->begin, r->end);
  }
}

void sample_pool::consume(std::span<const sample_range> ranges) {
  for (const auto& r : ranges) {
    auto it = open_.find(r.epoch);
    if (it == open_.end()) {
      continue;
    }
    it->second.consumed = std::min(config_.samples, it->second.consumed + r.size());
    if (it->second.consumed == config_.samples) {
      open_.erase(it);
      ++epochs_done_;
    }
  }
}

double sample_pool::passes() const noexcept {
  double used = static_cast<double>(epochs_done_) * static_cast<double>(config_.samples);
  for (const auto& [epoch, e] : open_) {
    used += static_cast<double>(e.consumed);
  }
  return used / static_cast<double>(config_.samples);
}

std::uint64_t sample_pool::remaining() const noexcept {
  if (config_.max_epochs == 0) {
    return 0;
  }
  std::uint64_t used = epochs_done_ * config_.samples;
  for (const auto& [epoch, e] : open_) {
    used += e.consumed;
  }
  const std::uint64_t all = config_.max_epochs * config_.samples;
  return all > used ? all - used : 0;
}

std::uint64_t sample_pool::available() const noexcept {
  std::uint64_t n = 0;
  for (const auto& [epoch, e] : open_) {
    for (const auto& [b, en] : e.available) {
      n += en - b;
    }
  }
  return n;
}

pool_state sample_pool::save() const {
  pool_state s;
  s.next_epoch = next_epoch_;
  s.epochs_done = epochs_done_;
  for (const auto& [epoch, e] : open_) {
    s.open.push_back({epoch, e.consumed, {e.available.rbegin(), e.available.rend()}});
  }
  return s;
}

epoch_permutation::epoch_permutation(std::uint64_t seed, std::uint64_t epoch, std::uint64_t samples) noexcept
    : samples_(samples) {
  // The smallest h >= 1 with 4^h >= samples: the Feistel network permutes 2h-bit values.
  while (half_ < 32 && (std::uint64_t{1} << (2 * half_)) < samples) {
    ++half_;
  }
  mask_ = half_ == 32 ? ~std::uint64_t{0} >> 32U : (std::uint64_t{1} << half_) - 1;
  std::uint64_t k = detail::splitmix64(detail::splitmix64(seed) ^ epoch);
  for (auto& key : keys_) {
    key = k;
    k = detail::splitmix64(k);
  }
}

std::uint64_t epoch_permutation::feistel(std::uint64_t x) const noexcept {
  std::uint64_t l = x >> half_;
  std::uint64_t r = x & mask_;
  for (const auto key : keys_) {
    const std::uint64_t next = l ^ (detail::splitmix64(r ^ key) & mask_);
    l = r;
    r = next;
  }
  return (l << half_) | r;
}

std::uint64_t epoch_permutation::operator()(std::uint64_t position) const noexcept {
  // Cycle walking: the network permutes [0, 4^h); following its cycle from a position below samples_
  // reaches a value below samples_ again, which makes the restriction a bijection of [0, samples_).
  std::uint64_t x = feistel(position);
  while (x >= samples_) {
    x = feistel(x);
  }
  return x;
}

std::pair<std::uint64_t, std::uint64_t> global_positions(const sample_range& r, std::uint64_t samples) noexcept {
  return {r.epoch * samples + r.begin, r.epoch * samples + r.end};
}

std::vector<std::size_t> shuffled_samples(std::span<const std::pair<std::uint64_t, std::uint64_t>> ranges,
                                          std::uint64_t samples, std::uint64_t seed, std::uint64_t round,
                                          std::uint64_t member) {
  std::vector<std::size_t> out;
  std::optional<epoch_permutation> perm;
  std::uint64_t perm_epoch = 0;
  for (const auto& [b, e] : ranges) {
    for (std::uint64_t q = b; q < e; ++q) {
      const std::uint64_t epoch = q / samples;
      if (!perm || perm_epoch != epoch) {
        perm.emplace(seed, epoch, samples);
        perm_epoch = epoch;
      }
      out.push_back(static_cast<std::size_t>((*perm)(q % samples)));
    }
  }
  detail::rng gen(detail::derive_seed(seed, tag_round_order, round, member));
  gen.shuffle(std::span<std::size_t>{out});
  return out;
}

}  // namespace prsgd::algorithms
