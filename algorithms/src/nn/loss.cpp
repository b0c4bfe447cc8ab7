// SPDX-License-Identifier: Apache-2.0
// The loss and the accuracy count on a batch of logits.
#include "prsgd/algorithms/layers.hpp"

#include <cmath>

#include "layer_kernels.hpp"
#include "prsgd/common/check.hpp"

namespace prsgd::algorithms {
namespace {

using namespace layer_kernels;

}  // namespace

float softmax_cross_entropy(const tensor& logits, std::span<const std::int32_t> labels, tensor* dlogits) {
  const index classes = logits.rows();
  const index batch = logits.cols();
  PRSGD_CHECK(static_cast<index>(labels.size()) == batch) << "one label per column";
  if (dlogits != nullptr) {
    dlogits->resize(classes, batch);
  }
  double total = 0.0;
  const float inv_batch = 1.0F / static_cast<float>(batch);
  for (index b = 0; b < batch; ++b) {
    const std::int32_t label = labels[static_cast<std::size_t>(b)];
    PRSGD_CHECK(label >= 0 && label < classes) << "label " << label << " out of range";
    const float m = logits.col(b).maxCoeff();
    float sum = 0.0F;
    for (index k = 0; k < classes; ++k) {
      sum += std::exp(logits(k, b) - m);
    }
    const float log_sum = std::log(sum);
    total += static_cast<double>(log_sum + m - logits(label, b));
    if (dlogits != nullptr) {
      for (index k = 0; k < classes; ++k) {
        (*dlogits)(k, b) = std::exp(logits(k, b) - m - log_sum) * inv_batch;
      }
      (*dlogits)(label, b) -= inv_batch;
    }
  }
  return static_cast<float>(total / static_cast<double>(batch));
}

std::size_t count_correct(const tensor& logits, std::span<const std::int32_t> labels) {
  std::size_t correct = 0;
  for (index b = 0; b < logits.cols(); ++b) {
    index best = 0;
    logits.col(b).maxCoeff(&best);
    if (best == labels[static_cast<std::size_t>(b)]) {
      ++correct;
    }
  }
  return correct;
}

}  // namespace prsgd::algorithms
