// SPDX-License-Identifier: Apache-2.0
// The same four patterns written for prsgd::runtime and (when built with CAF) for CAF 0.17, both on
// two scheduler threads, measured alternately in one process; prints medians and prsgd/CAF ratios.
//   bench_runtime_vs_caf [reps=5] [scale=1.0]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "prsgd/common/log.hpp"
#include "prsgd/runtime/runtime.hpp"

#ifdef PRSGD_BENCH_WITH_CAF
#include <caf/all.hpp>
#endif

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// Signals the benchmark driver once; identical for both frameworks.
struct done_signal {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  void set() {
    std::lock_guard lock{mu};
    done = true;
    cv.notify_all();
  }
  bool wait() {
    std::unique_lock lock{mu};
    return cv.wait_for(lock, 300s, [this] { return done; });
  }
};

struct sizes {
  int ping_pong_round_trips = 200'000;
  int fan_in_per_sender = 250'000;
  int ask_round_trips = 100'000;
  int spawns = 20'000;
};

double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

// ------------------------------------------------------------------------------------------------
// prsgd

prsgd::config prsgd_cfg() {
  prsgd::config cfg;
  cfg.threads = 2;
  cfg.compute_threads = 1;
  return cfg;
}

class pp_actor final : public prsgd::actor {
 public:
  explicit pp_actor(std::shared_ptr<done_signal> d) : d_(std::move(d)) {}
  void set_peer(prsgd::actor_ref<pp_actor> p) { peer_ = std::move(p); }
  void ball(int left) {
    if (left == 0) {
      d_->set();
      return;
    }
    peer_.tell(&pp_actor::ball, left - 1);
  }

 private:
  std::shared_ptr<done_signal> d_;
  prsgd::actor_ref<pp_actor> peer_;
};

double prsgd_ping_pong(const sizes& s) {
  prsgd::actor_system sys{prsgd_cfg()};
  auto d = std::make_shared<done_signal>();
  auto a = *sys.spawn<pp_actor>(d);
  auto b = *sys.spawn<pp_actor>(d);
  a.tell(&pp_actor::set_peer, b);
  b.tell(&pp_actor::set_peer, a);
  const auto t0 = steady::now();
  a.tell(&pp_actor::ball, 2 * s.ping_pong_round_trips);
  d->wait();
  return s.ping_pong_round_trips / seconds_since(t0);
}

class fan_sink final : public prsgd::actor {
 public:
  fan_sink(long expected, std::shared_ptr<done_signal> d) : expected_(expected), d_(std::move(d)) {}
  void push(int v) {
    sum_ += v;
    if (++n_ == expected_) {
      d_->set();
    }
  }

 private:
  long expected_;
  long n_ = 0;
  long sum_ = 0;
  std::shared_ptr<done_signal> d_;
};

class fan_source final : public prsgd::actor {
 public:
  explicit fan_source(prsgd::actor_ref<fan_sink> sink) : sink_(std::move(sink)) {}
  void start(int m) {
    for (int i = 0; i < m; ++i) {
      sink_.tell(&fan_sink::push, i);
    }
  }

 private:
  prsgd::actor_ref<fan_sink> sink_;
};

double prsgd_fan_in(const sizes& s) {
  prsgd::actor_system sys{prsgd_cfg()};
  auto d = std::make_shared<done_signal>();
  auto sink = *sys.spawn<fan_sink>(4L * s.fan_in_per_sender, d);
  std::vector<prsgd::actor_ref<fan_source>> sources;
  for (int i = 0; i < 4; ++i) {
    sources.push_back(*sys.spawn<fan_source>(sink));
  }
  const auto t0 = steady::now();
  for (auto& src : sources) {
    src.tell(&fan_source::start, s.fan_in_per_sender);
  }
  d->wait();
  return 4.0 * s.fan_in_per_sender / seconds_since(t0);
}

class echo_server final : public prsgd::actor {
 public:
  int echo(int v) { return v + 1; }
};

class ask_client final : public prsgd::actor {
 public:
  ask_client(prsgd::actor_ref<echo_server> server, int n, std::shared_ptr<done_signal> d)
      : server_(std::move(server)), n_(n), d_(std::move(d)) {}
  void go() { next(0); }

 private:
  void next(int i) {
    if (i == n_) {
      d_->set();
      return;
    }
    server_.ask(&echo_server::echo, i).then([this](prsgd::expected<int> r) { next(r ? *r : n_); });
  }
  prsgd::actor_ref<echo_server> server_;
  int n_;
  std::shared_ptr<done_signal> d_;
};

double prsgd_ask(const sizes& s) {
  prsgd::actor_system sys{prsgd_cfg()};
  auto d = std::make_shared<done_signal>();
  auto server = *sys.spawn<echo_server>();
  auto client = *sys.spawn<ask_client>(server, s.ask_round_trips, d);
  const auto t0 = steady::now();
  client.tell(&ask_client::go);
  d->wait();
  return s.ask_round_trips / seconds_since(t0);
}

class ephemeral final : public prsgd::actor {
 public:
  void on_start() override { quit(); }
};

double prsgd_spawn(const sizes& s) {
  prsgd::actor_system sys{prsgd_cfg()};
  const auto t0 = steady::now();
  for (int i = 0; i < s.spawns; ++i) {
    static_cast<void>(sys.spawn<ephemeral>());
  }
  if (!sys.await_all_stopped(300s)) {
    std::fprintf(stderr, "prsgd spawn: actors left\n");
  }
  return s.spawns / seconds_since(t0);
}

// ------------------------------------------------------------------------------------------------
// CAF 0.17

#ifdef PRSGD_BENCH_WITH_CAF

using go_atom = caf::atom_constant<caf::atom("go")>;

struct caf_setup {
  caf::actor_system_config cfg;
  caf_setup() { cfg.set("scheduler.max-threads", std::size_t{2}); }
};

struct caf_pp_state {
  caf::actor peer;
};

caf::behavior caf_pp(caf::stateful_actor<caf_pp_state>* self, std::shared_ptr<done_signal> d) {
  return {
      [=](const caf::actor& p) { self->state.peer = p; },
      [=](int left) {
        if (left == 0) {
          d->set();
          return;
        }
        self->send(self->state.peer, left - 1);
      },
  };
}

double caf_ping_pong(const sizes& s) {
  caf_setup setup;
  caf::actor_system sys{setup.cfg};
  auto d = std::make_shared<done_signal>();
  auto a = sys.spawn(caf_pp, d);
  auto b = sys.spawn(caf_pp, d);
  caf::anon_send(a, b);
  caf::anon_send(b, a);
  const auto t0 = steady::now();
  caf::anon_send(a, 2 * s.ping_pong_round_trips);
  d->wait();
  const double rate = s.ping_pong_round_trips / seconds_since(t0);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(b, caf::exit_reason::user_shutdown);
  return rate;
}

struct caf_sink_state {
  long n = 0;
  long sum = 0;
};

caf::behavior caf_sink(caf::stateful_actor<caf_sink_state>* self, long expected, std::shared_ptr<done_signal> d) {
  return {[=](int v) {
    self->state.sum += v;
    if (++self->state.n == expected) {
      d->set();
    }
  }};
}

caf::behavior caf_source(caf::event_based_actor* self, caf::actor sink) {
  return {[=](go_atom, int m) {
    for (int i = 0; i < m; ++i) {
      self->send(sink, i);
    }
  }};
}

double caf_fan_in(const sizes& s) {
  caf_setup setup;
  caf::actor_system sys{setup.cfg};
  auto d = std::make_shared<done_signal>();
  auto sink = sys.spawn(caf_sink, 4L * s.fan_in_per_sender, d);
  std::vector<caf::actor> sources;
  for (int i = 0; i < 4; ++i) {
    sources.push_back(sys.spawn(caf_source, sink));
  }
  const auto t0 = steady::now();
  for (auto& src : sources) {
    caf::anon_send(src, go_atom::value, s.fan_in_per_sender);
  }
  d->wait();
  const double rate = 4.0 * s.fan_in_per_sender / seconds_since(t0);
  for (auto& src : sources) {
    caf::anon_send_exit(src, caf::exit_reason::user_shutdown);
  }
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  return rate;
}

caf::behavior caf_echo(caf::event_based_actor*) {
  return {[](int v) { return v + 1; }};
}

struct caf_client_state {
  caf::actor server;
  int n = 0;
  std::shared_ptr<done_signal> d;
};

void caf_next(caf::stateful_actor<caf_client_state>* self, int i) {
  if (i == self->state.n) {
    self->state.d->set();
    return;
  }
  self->request(self->state.server, caf::infinite, i).then([self](int r) { caf_next(self, r); });
}

caf::behavior caf_client(caf::stateful_actor<caf_client_state>* self, caf::actor server, int n,
                         std::shared_ptr<done_signal> d) {
  self->state.server = std::move(server);
  self->state.n = n;
  self->state.d = std::move(d);
  return {[=](go_atom) { caf_next(self, 0); }};
}

double caf_ask(const sizes& s) {
  caf_setup setup;
  caf::actor_system sys{setup.cfg};
  auto d = std::make_shared<done_signal>();
  auto server = sys.spawn(caf_echo);
  auto client = sys.spawn(caf_client, server, s.ask_round_trips, d);
  const auto t0 = steady::now();
  caf::anon_send(client, go_atom::value);
  d->wait();
  const double rate = s.ask_round_trips / seconds_since(t0);
  caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
  return rate;
}

void caf_ephemeral(caf::event_based_actor* self) { self->quit(); }

double caf_spawn(const sizes& s) {
  caf_setup setup;
  caf::actor_system sys{setup.cfg};
  const auto t0 = steady::now();
  for (int i = 0; i < s.spawns; ++i) {
    static_cast<void>(sys.spawn(caf_ephemeral));
  }
  sys.await_all_actors_done();
  return s.spawns / seconds_since(t0);
}

#endif  // PRSGD_BENCH_WITH_CAF

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct pattern {
  const char* name;
  const char* unit;
  std::function<double(const sizes&)> prsgd_fn;
  std::function<double(const sizes&)> caf_fn;
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const double scale = argc > 2 ? std::atof(argv[2]) : 1.0;
  prsgd::log::set_level(prsgd::log::level::error);
  sizes s;
  s.ping_pong_round_trips = static_cast<int>(s.ping_pong_round_trips * scale);
  s.fan_in_per_sender = static_cast<int>(s.fan_in_per_sender * scale);
  s.ask_round_trips = static_cast<int>(s.ask_round_trips * scale);
  s.spawns = static_cast<int>(s.spawns * scale);
  std::vector<pattern> patterns{
      {"ping-pong (2 actors)", "round trips/s", prsgd_ping_pong, nullptr},
      {"fan-in (4 senders -> 1)", "messages/s", prsgd_fan_in, nullptr},
      {"ask/reply (request-then)", "round trips/s", prsgd_ask, nullptr},
      {"spawn (+start+stop)", "actors/s", prsgd_spawn, nullptr},
  };
#ifdef PRSGD_BENCH_WITH_CAF
  patterns[0].caf_fn = caf_ping_pong;
  patterns[1].caf_fn = caf_fan_in;
  patterns[2].caf_fn = caf_ask;
  patterns[3].caf_fn = caf_spawn;
#endif
  std::printf("runtime vs CAF: 2 scheduler threads each, %d reps (alternating), scale %.2f, %u hw threads\n", reps,
              scale, std::thread::hardware_concurrency());
  std::printf("| pattern | unit | prsgd median | CAF 0.17 median | prsgd/CAF |\n|---|---|---:|---:|---:|\n");
  for (auto& p : patterns) {
    std::vector<double> ours;
    std::vector<double> theirs;
    for (int r = 0; r < reps; ++r) {
      ours.push_back(p.prsgd_fn(s));
      if (p.caf_fn) {
        theirs.push_back(p.caf_fn(s));
      }
    }
    const double m_ours = median(ours);
    if (theirs.empty()) {
      std::printf("| %s | %s | %.0f | (CAF not built) | - |\n", p.name, p.unit, m_ours);
    } else {
      const double m_theirs = median(theirs);
      std::printf("| %s | %s | %.0f | %.0f | %.2f |\n", p.name, p.unit, m_ours, m_theirs, m_ours / m_theirs);
    }
    std::fflush(stdout);
  }
  return 0;
}
