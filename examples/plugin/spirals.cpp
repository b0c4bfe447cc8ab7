// SPDX-License-Identifier: Apache-2.0
// The example plugin's data set: `spirals`, points on interleaved spiral arms, one class per arm.
//
//   prsgd local --plugin ./libprsgd_example_plugin.so --dataset spirals --model mlp:2-64-64-3 ...
//
// A data set is a loader registered under a name: it gets a dataset_request (directory, which parts,
// seed, --data-option settings) and returns the shape, the class count and the splits asked for.
// This one computes its points instead of reading files, so it needs no --data-dir.
#include "spirals.hpp"

#include <charconv>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <random>
#include <string>

#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/common/expected.hpp"

namespace {

namespace alg = prsgd::algorithms;

constexpr const char* dataset_name = "spirals";
constexpr std::size_t train_per_arm = 1000;
constexpr std::size_t test_per_arm = 200;

/// Returns `per_arm` points of each of `arms` spiral arms: arm k turns 1.5 times around the origin, starting
/// at angle 2πk/arms, with Gaussian noise. The split's own fixed seed makes every process (and every run)
/// see the same points, whatever the job's --seed.
alg::dataset make_points(int arms, std::size_t per_arm, std::uint64_t seed, const char* split) {
  alg::dataset d;
  d.shape = {1, 1, 2};
  d.num_classes = arms;
  d.name = std::string{dataset_name} + ":" + split;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0F, 0.04F);
  std::uniform_real_distribution<float> along(0.05F, 1.0F);
  for (std::size_t i = 0; i < per_arm; ++i) {
    for (int k = 0; k < arms; ++k) {
      const float r = along(rng);
      const float theta =
          2.0F * std::numbers::pi_v<float> * (static_cast<float>(k) / static_cast<float>(arms) + 1.5F * r);
      d.features.push_back(r * std::cos(theta) + noise(rng));
      d.features.push_back(r * std::sin(theta) + noise(rng));
      d.labels.push_back(k);
    }
  }
  return d;
}

prsgd::expected<alg::loaded_dataset> load_spirals(const alg::dataset_request& request) {
  // Refuse options this loader does not know, so a misspelt --data-option is not silently ignored.
  PRSGD_TRY(alg::check_dataset_options(request, dataset_name, {"arms"}));
  int arms = 3;
  if (auto it = request.options.find("arms"); it != request.options.end()) {
    const std::string& text = it->second;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), arms);
    if (ec != std::errc{} || end != text.data() + text.size() || arms < 2 || arms > 8) {
      return prsgd::fail(prsgd::errc::invalid_argument,
                         "spirals: --data-option arms must be 2..8 (got '" + text + "')");
    }
  }
  alg::loaded_dataset out;
  out.shape = {1, 1, 2};
  out.num_classes = arms;
  out.train_size = train_per_arm * static_cast<std::size_t>(arms);  // cheap: no need to build the points
  if (request.parts == alg::dataset_parts::train) {
    out.train = make_points(arms, train_per_arm, 1, "train");
  } else if (request.parts == alg::dataset_parts::test_and_train_size) {
    out.test = make_points(arms, test_per_arm, 2, "test");
  }
  return out;
}

}  // namespace

int register_spirals(const prsgd_plugin_host* host) {
  // dataset_registry was appended to the host struct: an older host does not have it.
  if (!PRSGD_PLUGIN_HOST_HAS(host, dataset_registry) || host->dataset_registry == nullptr) {
    host->set_error(host->context, "prsgd_example_plugin needs a host with a data set registry");
    return 1;
  }
  auto* registry = static_cast<alg::dataset_registry*>(host->dataset_registry);
  auto added = registry->add(dataset_name, "points on spiral arms in 2-D, one class per arm (3 unless arms=K; plugin)",
                             load_spirals);
  if (!added) {
    host->set_error(host->context, added.error().message().c_str());
    return 2;
  }
  if (host->announce(host->context, "dataset", dataset_name) != 0) {
    (void)registry->remove(dataset_name);
    host->set_error(host->context, "the host refused to list data set 'spirals'");
    return 3;
  }
  return 0;
}
