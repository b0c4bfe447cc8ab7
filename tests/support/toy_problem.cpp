// SPDX-License-Identifier: Apache-2.0
#include "toy_problem.hpp"

#include <mutex>
#include <random>

#include "prsgd/algorithms/layers.hpp"
#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/common/check.hpp"

namespace prsgd::test {

std::shared_ptr<const algorithms::dataset> blobs(std::size_t n, std::uint64_t seed) {
  auto d = std::make_shared<algorithms::dataset>();
  d->shape = {8, 1, 1};
  d->num_classes = 2;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0F, 1.0F);
  for (std::size_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(i % 2);
    for (int k = 0; k < 8; ++k) {
      d->features.push_back(noise(rng) + (label == 0 ? -1.5F : 1.5F));
    }
    d->labels.push_back(label);
  }
  return d;
}

algorithms::model_config test_linear_config() {
  algorithms::model_config c;
  c.input = {8, 1, 1};
  c.num_classes = 2;
  return c;
}

void register_test_linear_model() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto ok = algorithms::model_registry::instance().add(
        test_linear_model, "8 -> 2 linear classifier for actor tests",
        [](const algorithms::model_config& c) -> expected<std::unique_ptr<algorithms::model>> {
          algorithms::network_builder b{c.input};
          b.linear(c.num_classes);
          return algorithms::model::make(test_linear_model, c.input, c.num_classes, b.take(), c.seed);
        });
    PRSGD_CHECK(ok.has_value()) << "cannot register test-linear: " << ok.error().message();
  });
}

}  // namespace prsgd::test
