// SPDX-License-Identifier: Apache-2.0
// Measures prsgd's training library the way bench/algorithms/nn/torch_bench.py measures PyTorch:
//   prsgd_nn_bench throughput <model> [steps]      forward+backward+SGD step, batch 64, one thread
//   prsgd_nn_bench train <model> [epochs]          Fashion-MNIST, batch 64, lr 0.05, momentum 0.9
//   prsgd_nn_bench parity <model> <steps> <outdir> step-level trace for bench/algorithms/nn/parity.py
//   prsgd_nn_bench init <model> <seed> <file>      the initial parameters `prsgd local --seed <seed>` starts
//                                                  from (x̄_0), raw float32, for bench/vs_pytorch's twin
// Prints one JSON line per run.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "prsgd/algorithms/fashion_mnist.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/sgd.hpp"

namespace {

using namespace prsgd::algorithms;
using clock_type = std::chrono::steady_clock;

constexpr std::size_t batch_size = 64;

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// CPU time of the whole process (every thread): on a shared, overloaded machine wall time mostly
// measures the scheduler, CPU time the work (a stray BLAS thread would show up here too).
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// The model (seed 1) and optimiser settings every mode uses; make_model prints the error and returns
// nullptr for an unknown model.
const sgd_options bench_sgd{.learning_rate = 0.05F, .momentum = 0.9F};

std::unique_ptr<model> make_model(const std::string& name, std::uint64_t seed = 1) {
  auto m = model_registry::instance().make(name, {{1, 28, 28}, 10, seed});
  if (!m) {
    std::fprintf(stderr, "%s\n", m.error().message().c_str());
    return nullptr;
  }
  return std::move(*m);
}

int throughput(const std::string& name, int steps) {
  // Random inputs: the speed of a step does not depend on the values.
  dataset data;
  data.shape = {1, 28, 28};
  data.num_classes = 10;
  const std::size_t n = 1024;
  data.features.resize(n * data.sample_size());
  data.labels.resize(n);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  for (float& f : data.features) {
    f = normal(rng);
  }
  for (std::size_t i = 0; i < n; ++i) {
    data.labels[i] = static_cast<std::int32_t>(i % 10);
  }
  auto m = make_model(name);
  if (!m) {
    return 2;
  }
  auto opt = sgd::make(bench_sgd);
  std::vector<std::size_t> batch(batch_size);
  auto run = [&](int count) {
    for (int s = 0; s < count; ++s) {
      const std::size_t offset = (static_cast<std::size_t>(s) * batch_size) % n;
      std::iota(batch.begin(), batch.end(), offset);
      (void)m->train_step(data, batch, *opt);
    }
  };
  run(std::max(3, steps / 10));  // warm-up: allocations, caches
  const double cpu0 = process_cpu_seconds();
  const auto start = clock_type::now();
  run(steps);
  const double secs = seconds_since(start);
  const double cpu = process_cpu_seconds() - cpu0;
  const double samples = static_cast<double>(steps) * batch_size;
  std::printf(
      "{\"impl\": \"prsgd\", \"mode\": \"throughput\", \"model\": \"%s\", \"steps\": %d, \"batch\": %zu, "
      "\"samples_per_s\": %.1f, \"samples_per_cpu_s\": %.1f, \"peak_rss_mib\": %.1f}\n",
      name.c_str(), steps, batch_size, samples / secs, samples / cpu, peak_rss_mib());
  return 0;
}

int train(const std::string& name, int epochs) {
  auto train_set = load_fashion_mnist({}, split::train);
  auto test_set = load_fashion_mnist({}, split::test);
  if (!train_set || !test_set) {
    std::fprintf(stderr, "cannot load Fashion-MNIST: %s\n",
                 (train_set ? test_set.error() : train_set.error()).message().c_str());
    return 2;
  }
  const double data_mib =
      static_cast<double>((train_set->features.size() + test_set->features.size()) * sizeof(float) +
                          (train_set->labels.size() + test_set->labels.size()) * sizeof(std::int32_t)) /
      (1024.0 * 1024.0);
  const double rss_after_load = peak_rss_mib();
  auto m = make_model(name);
  if (!m) {
    return 2;
  }
  auto opt = sgd::make(bench_sgd);
  std::vector<std::size_t> order(train_set->size());
  std::iota(order.begin(), order.end(), 0U);
  std::mt19937_64 rng(1);
  const auto start = clock_type::now();
  double last_loss = 0.0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double sum = 0.0;
    std::size_t batches = 0;
    for (std::size_t s = 0; s < order.size(); s += batch_size) {
      const std::size_t count = std::min(batch_size, order.size() - s);
      sum += m->train_step(*train_set, std::span<const std::size_t>(order.data() + s, count), *opt);
      ++batches;
    }
    last_loss = sum / static_cast<double>(batches);
  }
  const double train_secs = seconds_since(start);
  const evaluation e = m->evaluate(*test_set, batch_size);  // training-sized batches keep peak memory down
  std::printf(
      "{\"impl\": \"prsgd\", \"mode\": \"train\", \"model\": \"%s\", \"epochs\": %d, \"train_loss\": %.4f, "
      "\"test_loss\": %.4f, \"test_accuracy\": %.4f, \"train_seconds\": %.1f, \"data_mib\": %.1f, "
      "\"rss_after_load_mib\": %.1f, \"peak_rss_mib\": %.1f}\n",
      name.c_str(), epochs, last_loss, e.loss, e.accuracy, train_secs, data_mib, rss_after_load, peak_rss_mib());
  return 0;
}

// Whether parity() writes the parameters after `step` (1-based): every step up to 10, every 10th up
// to 100, every 50th after that, and the last one.
bool parity_checkpoint(int step, int steps) {
  return step <= 10 || (step <= 100 && step % 10 == 0) || step % 50 == 0 || step == steps;
}

bool write_raw(std::ofstream& out, const void* data, std::size_t bytes) {
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return static_cast<bool>(out);
}

// Trains `steps` batches of 64 from the registry's model (seed 1) with the `train` mode's settings and
// writes, for parity.py: init.f32 (params() before training), batches.u32 (steps * 64 train-set
// indices: mt19937_64(1) shuffles, one per pass), x0.f32 (the first batch's normalised features),
// params.f32 (params() after each checkpoint step, see parity_checkpoint), before.f32 (params()
// before those steps), grads.f32 (those steps' gradients), checkpoints.txt (their step numbers) and loss.txt (one batch
// loss per step). All binary files are raw native-endian (x86: little-endian) float32 / uint32.
int parity(const std::string& name, int steps, const std::string& dir) {
  auto train_set = load_fashion_mnist({}, split::train);
  if (!train_set) {
    std::fprintf(stderr, "cannot load Fashion-MNIST: %s\n", train_set.error().message().c_str());
    return 2;
  }
  auto m = make_model(name);
  if (!m) {
    return 2;
  }
  auto opt = sgd::make(bench_sgd);
  // The train mode's order: one mt19937_64(1) shuffle of the previous order per pass (passes here
  // drop their last partial batch, which only matters beyond 937 steps).
  const std::size_t total = static_cast<std::size_t>(steps) * batch_size;
  std::vector<std::uint32_t> batches;
  batches.reserve(total);
  std::vector<std::size_t> order(train_set->size());
  std::iota(order.begin(), order.end(), 0U);
  std::mt19937_64 rng(1);
  while (batches.size() < total) {
    std::shuffle(order.begin(), order.end(), rng);
    const std::size_t take = std::min(order.size() / batch_size * batch_size, total - batches.size());
    batches.insert(batches.end(), order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take));
  }
  std::ofstream init(dir + "/init.f32", std::ios::binary);
  std::ofstream batch_file(dir + "/batches.u32", std::ios::binary);
  std::ofstream x0(dir + "/x0.f32", std::ios::binary);
  std::ofstream params(dir + "/params.f32", std::ios::binary);
  std::ofstream before(dir + "/before.f32", std::ios::binary);
  std::ofstream grads(dir + "/grads.f32", std::ios::binary);
  std::ofstream checkpoints(dir + "/checkpoints.txt");
  std::ofstream loss(dir + "/loss.txt");
  const std::span<const float> p = m->params();
  bool ok = write_raw(init, p.data(), p.size_bytes()) &&
            write_raw(batch_file, batches.data(), batches.size() * sizeof(std::uint32_t));
  std::vector<float> sample(train_set->sample_size());
  for (std::size_t i = 0; ok && i < batch_size; ++i) {
    train_set->copy_sample(batches[i], sample.data());  // from floats or the shared byte cache
    ok = write_raw(x0, sample.data(), sample.size() * sizeof(float));
  }
  if (!ok) {
    std::fprintf(stderr, "cannot write to %s\n", dir.c_str());
    return 2;
  }
  std::vector<std::size_t> batch(batch_size);
  std::vector<float> previous(p.begin(), p.end());
  for (int step = 1; step <= steps; ++step) {
    const bool checkpoint = parity_checkpoint(step, steps);
    if (checkpoint) {
      previous.assign(p.begin(), p.end());
    }
    const auto first =
        batches.begin() + static_cast<std::ptrdiff_t>(step - 1) * static_cast<std::ptrdiff_t>(batch_size);
    std::copy(first, first + static_cast<std::ptrdiff_t>(batch_size), batch.begin());
    char line[32];
    std::snprintf(line, sizeof line, "%.9g\n", static_cast<double>(m->train_step(*train_set, batch, *opt)));
    loss << line;
    if (checkpoint) {
      const std::span<const float> g = std::as_const(*m).grads();
      write_raw(params, p.data(), p.size_bytes());
      write_raw(before, previous.data(), previous.size() * sizeof(float));
      write_raw(grads, g.data(), g.size_bytes());
      checkpoints << step << "\n";
    }
  }
  params.flush();
  before.flush();
  grads.flush();
  loss.flush();
  checkpoints.flush();
  if (!params || !before || !grads || !loss || !checkpoints) {
    std::fprintf(stderr, "cannot write to %s\n", dir.c_str());
    return 2;
  }
  std::printf(
      "{\"impl\": \"prsgd\", \"mode\": \"parity\", \"model\": \"%s\", \"steps\": %d, \"params\": %zu, "
      "\"trainable\": %zu, \"out\": \"%s\"}\n",
      name.c_str(), steps, p.size(), m->num_trainable(), dir.c_str());
  return 0;
}

}  // namespace

// Writes the parameters the averager of `prsgd --model <name> --seed <seed>` starts from: it builds x̄_0 with
// the registry's Fashion-MNIST configuration and that seed (cli/src/job_data.cpp).
int write_init(const std::string& name, std::uint64_t seed, const std::string& file) {
  auto m = make_model(name, seed);
  if (!m) {
    return 2;
  }
  const auto p = m->params();
  std::ofstream out(file, std::ios::binary);
  if (!write_raw(out, p.data(), p.size_bytes()) || !(out.flush())) {
    std::fprintf(stderr, "cannot write %s\n", file.c_str());
    return 1;
  }
  std::printf(
      "{\"impl\": \"prsgd\", \"mode\": \"init\", \"model\": \"%s\", \"seed\": %llu, \"params\": %zu, \"out\": "
      "\"%s\"}\n",
      name.c_str(), static_cast<unsigned long long>(seed), p.size(), file.c_str());
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s throughput|train <model> [steps|epochs]\n       %s parity <model> <steps> <outdir>\n"
                 "       %s init <model> <seed> <file>\nmodels:",
                 argv[0], argv[0], argv[0]);
    for (const auto& n : model_registry::instance().names()) {
      std::fprintf(stderr, " %s", n.c_str());
    }
    std::fprintf(stderr, "\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::string name = argv[2];
  if (mode == "throughput") {
    return throughput(name, argc > 3 ? std::atoi(argv[3]) : 200);
  }
  if (mode == "train") {
    return train(name, argc > 3 ? std::atoi(argv[3]) : 3);
  }
  if (mode == "parity") {
    if (argc < 5 || std::atoi(argv[3]) <= 0) {
      std::fprintf(stderr, "usage: %s parity <model> <steps> <outdir>\n", argv[0]);
      return 2;
    }
    return parity(name, std::atoi(argv[3]), argv[4]);
  }
  if (mode == "init") {
    if (argc < 5) {
      std::fprintf(stderr, "usage: %s init <model> <seed> <file>\n", argv[0]);
      return 2;
    }
    return write_init(name, std::strtoull(argv[3], nullptr, 10), argv[4]);
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
