// SPDX-License-Identifier: Apache-2.0
// Quick start: spawn actors, tell and ask, reply later with a response_promise, watch an actor die,
// offload work to the compute pool, and shut down cleanly.
#include <chrono>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "prsgd/runtime/runtime.hpp"

namespace {

using namespace std::chrono_literals;

/// Holds a number; `add` replies with the new value.
class counter final : public prsgd::actor {
 public:
  explicit counter(int start) : value_(start) {}
  int add(int d) { return value_ += d; }
  int fail() { throw std::runtime_error("counter asked to fail"); }

 private:
  int value_;
};

/// Collects `n` numbers from workers, then replies to whoever waits with their sum (a tiny barrier).
class summer final : public prsgd::actor {
 public:
  explicit summer(int n) : expected_(n) {}
  void submit(double v) {
    values_.push_back(v);
    maybe_reply();
  }
  prsgd::response_promise<double> wait_sum() {
    waiter_ = make_response_promise<double>();
    maybe_reply();
    return waiter_;
  }
  void watch(prsgd::actor_addr a) { monitor(a); }
  void on_down(const prsgd::down_msg& m) override {
    std::printf("  summer: actor %s stopped (%s)\n", prsgd::to_string(m.source).c_str(), m.reason.message().c_str());
  }

 private:
  void maybe_reply() {
    if (static_cast<int>(values_.size()) == expected_ && waiter_.pending()) {
      waiter_.deliver(std::accumulate(values_.begin(), values_.end(), 0.0));
    }
  }
  int expected_;
  std::vector<double> values_;
  prsgd::response_promise<double> waiter_;
};

/// Computes a partial sum on the compute pool and submits it to the summer.
class worker final : public prsgd::actor {
 public:
  worker(int index, prsgd::actor_ref<summer> sink) : index_(index), sink_(std::move(sink)) {}
  void on_start() override {
    run_compute(
        [i = index_] {
          double s = 0;
          for (int k = 1; k <= 1'000'000; ++k) {
            s += 1.0 / (static_cast<double>(k) * k + i);
          }
          return s;
        },
        [this](prsgd::expected<double> r) {
          sink_.tell(&summer::submit, r ? *r : 0.0);
          quit();
        });
  }

 private:
  int index_;
  prsgd::actor_ref<summer> sink_;
};

}  // namespace

int main() {
  prsgd::config cfg;
  cfg.threads = 2;
  prsgd::actor_system system{cfg};

  // 1. Spawn a named actor, ask it, block on the answer from main.
  auto c = system.spawn<counter>(prsgd::named{"counter"}, 0);
  if (!c) {
    std::fprintf(stderr, "spawn failed: %s\n", c.error().message().c_str());
    return 1;
  }
  c->tell(&counter::add, 10);
  auto v = c->ask(&counter::add, 5).get(5s);
  std::printf("hello_actors: counter says %d (expected 15)\n", v ? *v : -1);

  // 2. Look it up by name; errors come back as values, never as crashes.
  auto again = system.lookup<counter>("counter");
  auto bad = again->ask(&counter::fail).get(5s);
  std::printf("hello_actors: a throwing handler gives '%s'; the process lives on\n",
              bad ? "ok?!" : bad.error().message().c_str());

  // 3. Four workers compute on the compute pool; the summer replies when all four submitted.
  auto s = *system.spawn<summer>(4);
  for (int i = 0; i < 4; ++i) {
    auto w = *system.spawn<worker>(i, s);
    s.tell(&summer::watch, prsgd::actor_addr{w});
  }
  auto total = s.ask(&summer::wait_sum).get(30s);
  if (!total) {
    std::fprintf(stderr, "sum failed: %s\n", total.error().message().c_str());
    return 1;
  }
  std::printf("hello_actors: 4 workers summed to %.6f\n", *total);

  const bool drained = system.shutdown(5s);
  std::printf("hello_actors: shutdown %s, %zu actors left\n", drained ? "drained cleanly" : "hit the deadline",
              system.actor_count());
  return (v && *v == 15 && !bad && drained) ? 0 : 1;
}
