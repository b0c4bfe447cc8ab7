// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/job_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/schedule.hpp"

namespace prsgd::cli {

std::string resolve_dataset(const model_options& o) {
  if (o.dataset != "auto") {
    return o.dataset;
  }
  return o.model.rfind("kws", 0) == 0 ? "kws" : "fashion-mnist";
}

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

// FNV-1a over the labels as little-endian 32-bit values: equal on every host for the same labels in order.
std::uint64_t label_hash(const std::vector<std::int32_t>& labels) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const std::int32_t l : labels) {
    auto v = static_cast<std::uint32_t>(l);
    for (int b = 0; b < 4; ++b) {
      h ^= v & 0xFFU;
      h *= 0x100000001b3ULL;
      v >>= 8U;
    }
  }
  return h;
}

}  // namespace

expected<std::map<std::string, std::string, std::less<>>> parse_data_options(const std::vector<std::string>& options) {
  std::map<std::string, std::string, std::less<>> out;
  for (const auto& kv : options) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return fail(errc::invalid_argument, "--data-option must be KEY=VALUE (got '" + kv + "')");
    }
    if (!out.emplace(kv.substr(0, eq), kv.substr(eq + 1)).second) {
      return fail(errc::invalid_argument, "--data-option '" + kv.substr(0, eq) + "' is given twice");
    }
  }
  return out;
}

expected<job_data> load_job_data(const model_options& o, data_need need) {
  algorithms::dataset_request request;
  request.dir = o.data_dir;
  request.parts = need == data_need::train                 ? algorithms::dataset_parts::train
                  : need == data_need::train_size_and_test ? algorithms::dataset_parts::test_and_train_size
                                                           : algorithms::dataset_parts::shape;
  request.seed = o.seed;
  auto options = parse_data_options(o.data_options);
  PRSGD_TRY(options);
  request.options = std::move(*options);
  job_data out;
  out.name = resolve_dataset(o);
  auto loaded = algorithms::dataset_registry::instance().load(out.name, request);
  if (!loaded) {
    if (loaded.error().code == errc::not_found && !algorithms::dataset_registry::instance().contains(out.name)) {
      return fail(errc::invalid_argument, unknown_dataset_message(out.name));
    }
    return unexpected{loaded.error()};
  }
  out.model.input = {loaded->shape[0], loaded->shape[1], loaded->shape[2]};
  out.model.num_classes = loaded->num_classes;
  out.model.seed = o.seed;
  out.train_size = loaded->train_size;
  if (loaded->train) {
    out.label_hash = label_hash(loaded->train->labels);
    out.train = std::make_shared<const algorithms::dataset>(std::move(*loaded->train));
  } else if (loaded->train_labels) {
    out.label_hash = label_hash(*loaded->train_labels);
  }
  if (loaded->test) {
    out.test = std::make_shared<const algorithms::dataset>(std::move(*loaded->test));
  }
  return out;
}

std::string comma_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

std::string unknown_dataset_message(const std::string& name) {
  return "unknown --dataset '" + name +
         "' (registered: " + comma_list(algorithms::dataset_registry::instance().names()) +
         "; a --plugin can add more)";
}

namespace {

std::string shape_text(const algorithms::model_config& m) {
  return std::to_string(m.input.channels) + "x" + std::to_string(m.input.height) + "x" + std::to_string(m.input.width);
}

// Builds the model once: its parameter count, or why it does not fit the data set (one line).
expected<std::size_t> params_of(const model_options& o, const job_data& data) {
  auto m = algorithms::model_registry::instance().make(o.model, data.model);
  if (!m) {
    return fail(m.error().code,
                "--model " + o.model + " does not fit --dataset " + data.name + ": " + m.error().context);
  }
  return (*m)->num_params();
}

}  // namespace

expected<std::size_t> check_model_fits(const model_options& o, const job_data& data) { return params_of(o, data); }

expected<std::string> model_fingerprint(const model_options& o, const job_data& data) {
  auto params = params_of(o, data);
  PRSGD_TRY(params);
  return o.model + " in=" + shape_text(data.model) + " out=" + std::to_string(data.model.num_classes) +
         " params=" + std::to_string(*params);
}

std::string data_fingerprint(const job_data& data) {
  std::string text = data.name + " n=" + std::to_string(data.train_size) + " shape=" + shape_text(data.model) +
                     " classes=" + std::to_string(data.model.num_classes);
  if (data.label_hash) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(*data.label_hash));
    text += " labels=";
    text += hex;
  }
  return text;
}

expected<job_length> plan_job(const schedule_options& s, std::size_t batch, std::size_t train_size) {
  job_length j;
  const std::uint64_t n = static_cast<std::uint64_t>(std::max(s.min_workers, 1));
  j.steps_per_epoch = std::max<std::uint64_t>(1, ceil_div(train_size, n * std::max<std::size_t>(batch, 1)));
  if (s.mode == "minibatch") {
    j.interval = 1;
  } else if (s.interval_policy == "per-worker" && !s.intervals.empty()) {
    double sum = 0;
    for (int i : s.intervals) {
      sum += i;
    }
    j.interval = std::max<std::uint64_t>(
        1, static_cast<std::uint64_t>(std::llround(sum / static_cast<double>(s.intervals.size()))));
  } else if (s.interval_policy == "paper") {
    const std::uint64_t t = s.epochs > 0
                                ? static_cast<std::uint64_t>(s.epochs) * j.steps_per_epoch
                                : static_cast<std::uint64_t>(s.rounds) * static_cast<std::uint64_t>(s.interval);
    auto i = algorithms::paper_interval(static_cast<std::int64_t>(std::max<std::uint64_t>(t, 1)), static_cast<int>(n));
    PRSGD_TRY(i);
    j.interval = static_cast<std::uint64_t>(*i);
  } else {
    j.interval = static_cast<std::uint64_t>(std::max(s.interval, 1));
  }
  j.rounds_per_epoch = ceil_div(j.steps_per_epoch, j.interval);
  j.rounds =
      s.rounds > 0 ? static_cast<std::uint64_t>(s.rounds) : static_cast<std::uint64_t>(s.epochs) * j.rounds_per_epoch;
  if (j.rounds == 0) {
    return fail(errc::invalid_argument, "the job has no rounds (--epochs and --rounds are 0)");
  }
  j.total_steps = s.epochs > 0 ? static_cast<std::uint64_t>(s.epochs) * j.steps_per_epoch : j.rounds * j.interval;
  return j;
}

std::optional<algorithms::averaging_rule> averaging_rule_for(const schedule_options& s, const model_options& m) {
  if (auto rule = algorithms::parse_averaging_rule(s.averaging)) {
    return *rule;
  }
  // "auto" (options validation admits nothing else).
  if (!m.non_iid) {
    return algorithms::averaging_rule::by_samples;
  }
  return std::nullopt;
}

}  // namespace prsgd::cli
