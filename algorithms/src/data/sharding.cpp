// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/sharding.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "data/rng.hpp"

namespace prsgd::algorithms {
namespace {

// Stream tags keep the partition, class permutation and epoch shuffles independent.
constexpr std::uint64_t tag_iid = 1;
constexpr std::uint64_t tag_class_perm = 2;
constexpr std::uint64_t tag_class_order = 3;
constexpr std::uint64_t tag_dirichlet = 4;
constexpr std::uint64_t tag_worker_epoch = 5;
constexpr int dirichlet_attempts = 100;

// Returns [begin, end) of slice w when n items are cut into parts near-equal contiguous slices.
std::pair<std::size_t, std::size_t> slice(std::size_t n, std::size_t parts, std::size_t w) {
  return {n * w / parts, n * (w + 1) / parts};
}

std::vector<std::size_t> iid_slice(std::size_t n, std::size_t parts, std::size_t w, std::uint64_t seed,
                                   std::uint64_t epoch) {
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  detail::rng gen(detail::derive_seed(seed, tag_iid, epoch));
  gen.shuffle(std::span<std::size_t>{perm});
  const auto [b, e] = slice(n, parts, w);
  return {perm.begin() + static_cast<std::ptrdiff_t>(b), perm.begin() + static_cast<std::ptrdiff_t>(e)};
}

struct class_index {
  int num_classes = 0;
  std::vector<std::vector<std::size_t>> members;  // per class, ascending, then shuffled by seed
};

expected<class_index> index_classes(std::span<const std::int32_t> labels, std::uint64_t seed) {
  class_index out;
  std::int32_t max_label = -1;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) {
      return fail(errc::invalid_argument, "partition: negative label at index " + std::to_string(i));
    }
    max_label = std::max(max_label, labels[i]);
  }
  out.num_classes = max_label + 1;
  out.members.resize(static_cast<std::size_t>(out.num_classes));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    out.members[static_cast<std::size_t>(labels[i])].push_back(i);
  }
  for (std::size_t c = 0; c < out.members.size(); ++c) {
    detail::rng gen(detail::derive_seed(seed, tag_class_order, c));
    gen.shuffle(std::span<std::size_t>{out.members[c]});
  }
  return out;
}

expected<std::vector<std::vector<std::size_t>>> by_label(std::span<const std::int32_t> labels, int num_workers,
                                                         const shard_config& config) {
  auto classes = index_classes(labels, config.seed);
  PRSGD_TRY(classes);
  const int c_count = classes->num_classes;
  const int k = config.classes_per_worker;
  if (k < 1 || k > c_count) {
    return fail(errc::invalid_argument,
                "partition: classes_per_worker " + std::to_string(k) + " outside [1, " + std::to_string(c_count) + "]");
  }
  if (static_cast<long long>(num_workers) * k < c_count) {
    return fail(errc::invalid_argument, "partition: " + std::to_string(num_workers) + " workers x " +
                                            std::to_string(k) + " classes cannot cover " + std::to_string(c_count) +
                                            " classes; raise classes_per_worker");
  }
  std::vector<int> class_perm(static_cast<std::size_t>(c_count));
  std::iota(class_perm.begin(), class_perm.end(), 0);
  detail::rng gen(detail::derive_seed(config.seed, tag_class_perm));
  gen.shuffle(std::span<int>{class_perm});
  // owners[c] lists the workers holding class c, in worker order.
  std::vector<std::vector<std::size_t>> owners(static_cast<std::size_t>(c_count));
  for (int w = 0; w < num_workers; ++w) {
    for (int j = 0; j < k; ++j) {
      const int c = class_perm[static_cast<std::size_t>((w * k + j) % c_count)];
      owners[static_cast<std::size_t>(c)].push_back(static_cast<std::size_t>(w));
    }
  }
  std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(num_workers));
  for (std::size_t c = 0; c < owners.size(); ++c) {
    const auto& members = classes->members[c];
    for (std::size_t o = 0; o < owners[c].size(); ++o) {
      const auto [b, e] = slice(members.size(), owners[c].size(), o);
      auto& dst = out[owners[c][o]];
      dst.insert(dst.end(), members.begin() + static_cast<std::ptrdiff_t>(b),
                 members.begin() + static_cast<std::ptrdiff_t>(e));
    }
  }
  return out;
}

expected<std::vector<std::vector<std::size_t>>> dirichlet(std::span<const std::int32_t> labels, int num_workers,
                                                          const shard_config& config) {
  if (!(config.alpha > 0) || !std::isfinite(config.alpha)) {
    return fail(errc::invalid_argument, "partition: dirichlet alpha must be > 0");
  }
  auto classes = index_classes(labels, config.seed);
  PRSGD_TRY(classes);
  const auto n_workers = static_cast<std::size_t>(num_workers);
  std::vector<double> q(n_workers);
  for (int attempt = 0; attempt < dirichlet_attempts; ++attempt) {
    std::vector<std::vector<std::size_t>> out(n_workers);
    detail::rng gen(detail::derive_seed(config.seed, tag_dirichlet, static_cast<std::uint64_t>(attempt)));
    for (const auto& members : classes->members) {
      double total = 0;
      while (!(total > 0)) {  // a sum of underflowed draws is zero: draw again
        total = 0;
        for (auto& v : q) {
          v = gen.gamma(config.alpha);
          total += v;
        }
      }
      double cumulative = 0;
      std::size_t begin = 0;
      for (std::size_t w = 0; w < n_workers; ++w) {
        cumulative += q[w] / total;
        const std::size_t end =
            w + 1 == n_workers
                ? members.size()
                : std::min(members.size(),
                           static_cast<std::size_t>(std::floor(cumulative * static_cast<double>(members.size()))));
        const std::size_t e = std::max(begin, end);
        out[w].insert(out[w].end(), members.begin() + static_cast<std::ptrdiff_t>(begin),
                      members.begin() + static_cast<std::ptrdiff_t>(e));
        begin = e;
      }
    }
    const bool ok = std::all_of(out.begin(), out.end(), [&](const auto& s) {
      return s.size() >= std::max<std::size_t>(1, config.min_samples_per_worker);
    });
    if (ok) {
      return out;
    }
  }
  return fail(errc::invalid_argument, "partition: dirichlet(alpha=" + std::to_string(config.alpha) +
                                          ") left a worker below " + std::to_string(config.min_samples_per_worker) +
                                          " samples in " + std::to_string(dirichlet_attempts) +
                                          " attempts; raise alpha or lower min_samples_per_worker");
}

expected<void> check_common(std::size_t n, int num_workers) {
  if (num_workers < 1) {
    return fail(errc::invalid_argument, "partition: num_workers must be >= 1");
  }
  if (static_cast<std::size_t>(num_workers) > n) {
    return fail(errc::invalid_argument,
                "partition: " + std::to_string(num_workers) + " workers for " + std::to_string(n) + " samples");
  }
  return {};
}

}  // namespace

expected<shard_scheme> parse_shard_scheme(std::string_view name) {
  if (name == "iid") {
    return shard_scheme::iid;
  }
  if (name == "by-label") {
    return shard_scheme::by_label;
  }
  if (name == "dirichlet") {
    return shard_scheme::dirichlet;
  }
  return fail(errc::invalid_argument, "unknown shard scheme '" + std::string{name} + "' (iid | by-label | dirichlet)");
}

std::string_view to_string(shard_scheme scheme) noexcept {
  switch (scheme) {
    case shard_scheme::iid: return "iid";
    case shard_scheme::by_label: return "by-label";
    case shard_scheme::dirichlet: return "dirichlet";
  }
  return "unknown";
}

expected<std::vector<std::vector<std::size_t>>> partition(std::span<const std::int32_t> labels, int num_workers,
                                                          const shard_config& config, std::uint64_t epoch) {
  PRSGD_TRY(check_common(labels.size(), num_workers));
  switch (config.scheme) {
    case shard_scheme::iid: {
      std::vector<std::vector<std::size_t>> out;
      for (int w = 0; w < num_workers; ++w) {
        out.push_back(iid_slice(labels.size(), static_cast<std::size_t>(num_workers), static_cast<std::size_t>(w),
                                config.seed, epoch));
      }
      return out;
    }
    case shard_scheme::by_label:
    case shard_scheme::dirichlet: {
      auto parts = config.scheme == shard_scheme::by_label ? by_label(labels, num_workers, config)
                                                           : dirichlet(labels, num_workers, config);
      PRSGD_TRY(parts);
      for (auto& p : *parts) {
        std::sort(p.begin(), p.end());
      }
      return parts;
    }
  }
  return fail(errc::invalid_argument, "partition: unknown scheme");
}

expected<shard_sampler> shard_sampler::make(std::span<const std::int32_t> labels, int worker, int num_workers,
                                            const shard_config& config, std::size_t batch_size, bool drop_last) {
  PRSGD_TRY(check_common(labels.size(), num_workers));
  if (worker < 0 || worker >= num_workers) {
    return fail(errc::invalid_argument, "shard_sampler: worker " + std::to_string(worker) + " outside [0, " +
                                            std::to_string(num_workers) + ")");
  }
  if (batch_size == 0) {
    return fail(errc::invalid_argument, "shard_sampler: batch_size must be > 0");
  }
  shard_sampler s;
  s.config_ = config;
  s.worker_ = worker;
  s.num_workers_ = num_workers;
  s.batch_size_ = batch_size;
  s.drop_last_ = drop_last;
  s.num_samples_ = labels.size();
  if (config.scheme != shard_scheme::iid) {
    auto parts = partition(labels, num_workers, config);
    PRSGD_TRY(parts);
    s.owned_ = std::move((*parts)[static_cast<std::size_t>(worker)]);
  }
  s.load_epoch(0);
  if (s.order_.empty() || (drop_last && s.order_.size() < batch_size)) {
    return fail(errc::invalid_argument, "shard_sampler: worker " + std::to_string(worker) + " has " +
                                            std::to_string(s.order_.size()) + " samples, batch size " +
                                            std::to_string(batch_size));
  }
  return s;
}

void shard_sampler::load_epoch(std::uint64_t epoch) {
  epoch_ = epoch;
  position_ = 0;
  if (config_.scheme == shard_scheme::iid) {
    order_ = iid_slice(num_samples_, static_cast<std::size_t>(num_workers_), static_cast<std::size_t>(worker_),
                       config_.seed, epoch);
    return;
  }
  order_ = owned_;
  detail::rng gen(detail::derive_seed(config_.seed, tag_worker_epoch, static_cast<std::uint64_t>(worker_), epoch));
  gen.shuffle(std::span<std::size_t>{order_});
}

std::span<const std::size_t> shard_sampler::next_batch() {
  const std::size_t remaining = order_.size() - static_cast<std::size_t>(position_);
  if (remaining == 0 || (drop_last_ && remaining < batch_size_)) {
    load_epoch(epoch_ + 1);
  }
  const std::size_t take = std::min(batch_size_, order_.size() - static_cast<std::size_t>(position_));
  std::span<const std::size_t> out{order_.data() + position_, take};
  position_ += take;
  return out;
}

expected<void> shard_sampler::restore(sampler_state state) {
  // Shard sizes do not change between epochs, so the bound can be checked before reloading.
  if (state.position > order_.size()) {
    return fail(errc::invalid_argument, "shard_sampler: position " + std::to_string(state.position) +
                                            " beyond shard of " + std::to_string(order_.size()));
  }
  if (state.epoch != epoch_) {
    load_epoch(state.epoch);
  }
  position_ = state.position;
  return {};
}

std::size_t shard_sampler::batches_per_epoch() const noexcept {
  return drop_last_ ? order_.size() / batch_size_ : (order_.size() + batch_size_ - 1) / batch_size_;
}

}  // namespace prsgd::algorithms
