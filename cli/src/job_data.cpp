// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/job_data.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "prsgd/algorithms/fashion_mnist.hpp"
#include "prsgd/algorithms/kws_data.hpp"
#include "prsgd/algorithms/schedule.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::cli {

std::string resolve_dataset(const model_options& o) {
  if (o.dataset != "auto") {
    return o.dataset;
  }
  return o.model.rfind("kws", 0) == 0 ? "kws" : "fashion-mnist";
}

namespace {

void describe(job_data& out, const algorithms::dataset& d, const model_options& o) {
  out.model.input = {d.shape[0], d.shape[1], d.shape[2]};
  out.model.num_classes = d.num_classes;
  out.model.seed = o.seed;
}

expected<job_data> load_fashion(const model_options& o, data_need need) {
  job_data out;
  out.name = "fashion-mnist";
  const std::string dir = o.data_dir.empty() ? algorithms::fashion_mnist_default_dir() : o.data_dir;
  const auto hint = [](error e) {
    e.context += " (Fashion-MNIST: install the Debian package dataset-fashion-mnist, or pass --data-dir)";
    return unexpected{std::move(e)};
  };
  if (need == data_need::train) {
    auto train = algorithms::load_fashion_mnist(dir, algorithms::split::train);
    if (!train) {
      return hint(train.error());
    }
    out.train_size = train->size();
    describe(out, *train, o);
    out.train = std::make_shared<const algorithms::dataset>(std::move(*train));
    return out;
  }
  // The averager needs the training split's size only: its label file, not 47 MB of decompressed images.
  auto train_size = algorithms::fashion_mnist_size(dir, algorithms::split::train);
  if (!train_size) {
    return hint(train_size.error());
  }
  auto test = algorithms::load_fashion_mnist(dir, algorithms::split::test);
  if (!test) {
    return hint(test.error());
  }
  out.train_size = *train_size;
  describe(out, *test, o);
  out.test = std::make_shared<const algorithms::dataset>(std::move(*test));
  return out;
}

expected<job_data> load_keywords(const model_options& o, data_need need) {
  job_data out;
  out.name = "kws";
  algorithms::kws_options k;
  k.root = o.data_dir.empty() ? std::filesystem::path{"data/kws"} : std::filesystem::path{o.data_dir};
  k.cache_file = k.root / "features.cache";
  auto data = algorithms::load_kws(k);
  if (!data) {
    auto e = data.error();
    e.context += " (make the keyword set with ops/make-kws-data --out " + k.root.string() + ", or pass --data-dir)";
    return unexpected{e};
  }
  PRSGD_LOG(info, "data") << "keyword set " << k.root.string() << ": " << data->train.size() << " train, "
                          << data->test.size() << " test clips" << (data->from_cache ? " (cached features)" : "");
  out.train_size = data->train.size();
  describe(out, data->train, o);
  if (need == data_need::train) {
    out.train = std::make_shared<const algorithms::dataset>(std::move(data->train));
  } else {
    out.test = std::make_shared<const algorithms::dataset>(std::move(data->test));
  }
  return out;
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

}  // namespace

expected<job_data> load_job_data(const model_options& o, data_need need) {
  const auto which = resolve_dataset(o);
  if (which == "kws") {
    return load_keywords(o, need);
  }
  return load_fashion(o, need);
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
    j.interval = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(sum / static_cast<double>(s.intervals.size()))));
  } else if (s.interval_policy == "paper") {
    const std::uint64_t t = s.epochs > 0 ? static_cast<std::uint64_t>(s.epochs) * j.steps_per_epoch
                                         : static_cast<std::uint64_t>(s.rounds) * static_cast<std::uint64_t>(s.interval);
    auto i = algorithms::paper_interval(static_cast<std::int64_t>(std::max<std::uint64_t>(t, 1)), static_cast<int>(n));
    PRSGD_TRY(i);
    j.interval = static_cast<std::uint64_t>(*i);
  } else {
    j.interval = static_cast<std::uint64_t>(std::max(s.interval, 1));
  }
  j.rounds_per_epoch = ceil_div(j.steps_per_epoch, j.interval);
  j.rounds = s.rounds > 0 ? static_cast<std::uint64_t>(s.rounds)
                          : static_cast<std::uint64_t>(s.epochs) * j.rounds_per_epoch;
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
