// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the files that implement averager_core (averager_core.cpp, averager_members.cpp,
// averager_barrier.cpp, averager_operators.cpp). Not installed.
#pragma once

#include "prsgd/actors/averager_core.hpp"
#include "prsgd/common/check.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>
#include <vector>

namespace prsgd::actors::core_detail {

inline constexpr std::string_view log_component = "averager";

// Queues `m` for `member`, over the member's route.
inline void send_to(actions& out, member_id member, any_msg m) {
  out.sends.push_back({member, std::move(m), std::nullopt});
}

// Queues `m` as a reply over the connection the message came in on (no route is recorded for it).
inline void reply(actions& out, member_id member, any_msg m, origin_t via) {
  out.sends.push_back({member, std::move(m), via});
}

inline double to_seconds(clock_source::duration d) { return std::chrono::duration<double>(d).count(); }

inline std::string_view rule_name(algorithms::averaging_rule r) {
  switch (r) {
    case algorithms::averaging_rule::uniform: return "uniform";
    case algorithms::averaging_rule::by_samples: return "samples";
    case algorithms::averaging_rule::step_normalised: return "step-normalised";
  }
  return "unknown";
}

inline double median_of(std::vector<double> v) {
  PRSGD_CHECK(!v.empty()) << "median of nothing";
  const auto mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
  }
  return m;
}

inline bool all_finite(const std::vector<float>& v) {
  return Eigen::Map<const Eigen::VectorXf>(v.data(), static_cast<Eigen::Index>(v.size())).allFinite();
}

// (1/N) Σ ||x_i − avg||², one vectorised pass per input.
inline double consensus_distance(const std::vector<algorithms::contribution>& inputs, const std::vector<float>& avg) {
  const Eigen::Map<const Eigen::VectorXf> mean(avg.data(), static_cast<Eigen::Index>(avg.size()));
  double sum = 0;
  for (const auto& in : inputs) {
    const Eigen::Map<const Eigen::VectorXf> x(in.params.data(), static_cast<Eigen::Index>(in.params.size()));
    sum += static_cast<double>((x - mean).squaredNorm());
  }
  return sum / static_cast<double>(inputs.size());
}

}  // namespace prsgd::actors::core_detail
