// SPDX-License-Identifier: Apache-2.0
// Training embedded in your own program: an actor system inside this process runs a PR-SGD averager and
// three workers on a model this program registers itself, over real ZeroMQ sockets on 127.0.0.1, and
// reads the result through futures. Nothing here is private API: it is what a service links with
// find_package(prsgd) and prsgd::actors + prsgd::transport_zmq.
//
//   prsgd_embed_training [ROUNDS]      (Fashion-MNIST from Debian's dataset-fashion-mnist or $PRSGD_FMNIST_DIR)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/actors/worker_actor.hpp"
#include "prsgd/algorithms/fashion_mnist.hpp"
#include "prsgd/algorithms/layers.hpp"
#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/transport/zmq_transport.hpp"

using namespace std::chrono_literals;

namespace {

// 1. A model of our own: a linear classifier (multinomial logistic regression) on the flattened image.
//    Registered by name, so the averager and the workers build identical copies.
bool register_my_model() {
  auto ok = prsgd::algorithms::model_registry::instance().add(
      "my-logreg", "linear classifier on the flattened image (this program's own model)",
      [](const prsgd::algorithms::model_config& c) -> prsgd::expected<std::unique_ptr<prsgd::algorithms::model>> {
        prsgd::algorithms::network_builder b{c.input};
        b.linear(c.num_classes);
        return prsgd::algorithms::model::make("my-logreg", c.input, c.num_classes, b.take(), c.seed);
      });
  if (!ok) {
    std::fprintf(stderr, "cannot register my-logreg: %s\n", ok.error().message().c_str());
  }
  return ok.has_value();
}

// 2. Every actor talks through its own ZeroMQ transport; the factory gets the handlers the actor wants.
prsgd::actors::transport_factory zmq(const std::string& name) {
  return [name](prsgd::transport_handlers h) {
    prsgd::transport_config cfg;
    cfg.node_name = name;
    return prsgd::make_transport("zmq", cfg, std::move(h));
  };
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t rounds = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 40;
  prsgd::log::set_level(prsgd::log::level::warn);  // the actors log every round at info
  if (rounds == 0 || !register_my_model()) {
    std::fprintf(stderr, "usage: %s [ROUNDS > 0]\n", argv[0]);
    return 2;
  }
  auto train = prsgd::algorithms::load_fashion_mnist({}, prsgd::algorithms::split::train);
  auto test = prsgd::algorithms::load_fashion_mnist({}, prsgd::algorithms::split::test);
  if (!train || !test) {
    std::fprintf(stderr, "cannot load Fashion-MNIST: %s (apt-get install dataset-fashion-mnist)\n",
                 (!train ? train.error() : test.error()).message().c_str());
    return 1;
  }
  auto train_set = std::make_shared<const prsgd::algorithms::dataset>(std::move(*train));
  auto test_set = std::make_shared<const prsgd::algorithms::dataset>(std::move(*test));

  // 3. The actor system: two actor threads, two compute threads (training and evaluation run there).
  prsgd::config sc;
  sc.threads = 2;
  sc.compute_threads = 2;
  prsgd::actor_system system{sc};

  // 4. The averager: restart barrier over three workers, I = 8, the result delivered into a promise.
  std::promise<prsgd::actors::job_summary> done;
  auto result = done.get_future();
  prsgd::actors::averager_actor_config a;
  a.core.interval = 8;
  a.core.step_size = 0.05;
  a.core.max_rounds = rounds;
  a.core.min_workers = 3;
  a.core.heartbeat_interval = 200ms;
  a.core.heartbeat_timeout = 2s;
  a.model_name = "my-logreg";
  a.model.input = {1, 28, 28};
  a.model.num_classes = 10;
  a.test_set = test_set;
  a.core.eval_every = rounds / 4 > 0 ? rounds / 4 : 1;
  a.on_round = [](const prsgd::actors::round_metrics& m) {
    if (m.test_acc) {
      std::printf("round %llu: %zu workers, train loss %.4f, test accuracy %.2f%%\n",
                  static_cast<unsigned long long>(m.round), m.members, m.train_loss.value_or(0), 100 * *m.test_acc);
    }
  };
  a.on_done = [&done](const prsgd::actors::job_summary& s) { done.set_value(s); };
  std::vector<std::shared_ptr<prsgd::transport>> links(4);
  auto averager = prsgd::actors::start_averager(system, a, zmq("averager"), "tcp://127.0.0.1:*", &links[0]);
  if (!averager) {
    std::fprintf(stderr, "cannot start the averager: %s\n", averager.error().message().c_str());
    return 1;
  }
  std::printf("averager listening on %s\n", averager->second.c_str());

  // 5. Three workers connecting to the averager's real endpoint; the averager gives each its id and a third
  //    of the training set (min_workers = 3 shards).
  for (int i = 0; i < 3; ++i) {
    prsgd::actors::worker_actor_config w;
    w.core.incarnation = static_cast<prsgd::actors::incarnation_t>(i + 1);  // the JOIN nonce, one per worker
    w.core.heartbeat_interval = 200ms;
    w.core.averager_timeout = 2s;
    w.model_name = "my-logreg";
    w.model.input = {1, 28, 28};
    w.model.num_classes = 10;
    w.sgd.momentum = 0.9F;
    w.train_set = train_set;
    w.batch_size = 64;
    auto worker = prsgd::actors::start_worker(system, w, zmq("worker-" + std::to_string(i)), averager->second,
                                              &links[static_cast<std::size_t>(i) + 1]);
    if (!worker) {
      std::fprintf(stderr, "cannot start worker %d: %s\n", i, worker.error().message().c_str());
      return 1;
    }
  }

  // 6. Results through futures: the summary the averager hands to on_done, and an `ask` for its counters.
  if (result.wait_for(300s) != std::future_status::ready) {
    std::fprintf(stderr, "the job did not finish within 300 s\n");
    return 1;
  }
  const auto summary = result.get();
  auto counters = averager->first.ask([](prsgd::actors::averager_actor& x) { return x.counters(); }).get(5s);
  if (!counters) {
    std::fprintf(stderr, "ask failed: %s\n", counters.error().message().c_str());
    return 1;
  }
  std::printf(
      "done: %llu rounds, test accuracy %.2f%%, %.1f MB in / %.1f MB out, %.1f s; models accepted %llu, "
      "late %llu, duplicate %llu\n",
      static_cast<unsigned long long>(summary.rounds), 100 * summary.test_acc.value_or(0),
      static_cast<double>(summary.bytes_in) / 1e6, static_cast<double>(summary.bytes_out) / 1e6, summary.wall_s,
      static_cast<unsigned long long>(counters->accepted), static_cast<unsigned long long>(counters->late),
      static_cast<unsigned long long>(counters->duplicate));
  for (auto& l : links) {
    l->stop();
  }
  system.shutdown(5s);
  // A linear model reaches about 80% on Fashion-MNIST within a few hundred steps; less means it did not train.
  return summary.rounds == rounds && summary.test_acc.value_or(0) > 0.7 ? 0 : 1;
}
