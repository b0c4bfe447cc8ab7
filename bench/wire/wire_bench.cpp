// SPDX-License-Identifier: Apache-2.0
// Remote actor call rates under Ray's microbenchmark names, between two OS processes over
// tcp://127.0.0.1, through prsgd::wire (node + remote_ref::ask), next to raw cppzmq round trips:
//   raw      one DEALER ping-pong (64 B) to a ROUTER echo thread in the other process (own contexts)
//   1:1 sync        one caller thread: ask, wait for the answer, repeat
//   1:1 async       one caller thread: `window` asks in flight, then wait for all, repeat
//   n:n async       n caller threads on n nodes, each to its own actor on its own node in the other
//                   process, `window` asks in flight each
// Rounds alternate raw and prsgd so machine noise hits both alike; medians over rounds.
//   wire_bench [--rounds 5] [--seconds 1] [--n 2] [--window 1000]
// The parent starts `wire_bench --serve <n>` as the other process (its stdout says where things are).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/runtime/node.hpp"
#include "prsgd/transport/zmq_transport.hpp"

namespace {

using steady = std::chrono::steady_clock;

class bench_actor final : public prsgd::actor {
 public:
  int ping(int x) { return x; }
};

void register_types(prsgd::wire::remote_registry& reg) {
  reg.add<bench_actor>("bench_actor").method("ping", &bench_actor::ping);
}

prsgd::wire::transport_factory zmq_factory() {
  return
      [](prsgd::transport_config c, prsgd::transport_handlers h) -> prsgd::expected<std::unique_ptr<prsgd::transport>> {
        auto t = prsgd::zmq_transport::make(std::move(c), std::move(h));
        if (!t) {
          return std::move(t).error();
        }
        return std::unique_ptr<prsgd::transport>(std::move(*t));
      };
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// ---- the serving process ----

int serve(int n) {
  prsgd::wire::remote_registry reg;
  register_types(reg);
  prsgd::config cfg;
  cfg.threads = 2;
  cfg.compute_threads = 1;
  prsgd::actor_system system{cfg};
  std::vector<std::unique_ptr<prsgd::wire::node>> nodes;
  for (int i = 0; i < n; ++i) {
    prsgd::wire::node_config ncfg;
    ncfg.name = "server-" + std::to_string(i);
    auto node = prsgd::wire::node::make(system, reg, ncfg, zmq_factory());
    if (!node) {
      std::cerr << "serve: " << node.error().message() << "\n";
      return 1;
    }
    auto actor = system.spawn<bench_actor>();
    if (!actor) {
      std::cerr << "serve: spawn: " << actor.error().message() << "\n";
      return 1;
    }
    const auto addr = (*node)->address_of(actor->addr());
    std::cout << "NODE " << (*node)->name() << " " << (*node)->endpoint() << " " << addr.id << std::endl;
    nodes.push_back(std::move(*node));
  }
  // Raw echo: a ROUTER in its own context, like a node's transport, owned by the echo thread.
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  std::cout << "RAW " << router.get(zmq::sockopt::last_endpoint) << std::endl;
  std::thread echo([sock = std::move(router)]() mutable {
    while (true) {
      zmq::message_t id;
      zmq::message_t body;
      try {
        if (!sock.recv(id)) {
          continue;
        }
        (void)sock.recv(body);
        (void)sock.send(id, zmq::send_flags::sndmore);
        (void)sock.send(body, zmq::send_flags::none);
      } catch (const zmq::error_t&) {
        return;  // ETERM: the context is shutting down; the socket closes with this thread
      }
    }
  });
  std::cout << "READY" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  ctx.shutdown();
  echo.join();
  for (auto& node : nodes) {
    node->stop();
  }
  system.shutdown(std::chrono::seconds(2));
  return 0;
}

// ---- the calling process ----

struct server_node {
  std::string name;
  std::string endpoint;
  std::uint64_t actor_id = 0;
};

struct child {
  pid_t pid = -1;
  int to_child = -1;  // its stdin; closing it ends the child
  FILE* from_child = nullptr;
};

child start_server(const char* self, int n) {
  int in_pipe[2];
  int out_pipe[2];
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    close(in_pipe[1]);
    close(out_pipe[0]);
    const std::string count = std::to_string(n);
    execl(self, self, "--serve", count.c_str(), static_cast<char*>(nullptr));
    std::perror("execl");
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  return child{pid, in_pipe[1], fdopen(out_pipe[0], "r")};
}

// Raw cppzmq ping-pong client with its own context, connected once.
class raw_client {
 public:
  explicit raw_client(const std::string& endpoint) : dealer_(ctx_, zmq::socket_type::dealer) {
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.connect(endpoint);
    (void)run(std::chrono::milliseconds(200));  // warm-up: connection set up
  }
  // Round trips per second over about `d`.
  double run(steady::duration d) {
    const std::string small(64, 'p');
    std::uint64_t count = 0;
    const auto t0 = steady::now();
    const auto end = t0 + d;
    auto now = t0;
    while (now < end) {
      for (int i = 0; i < 16; ++i) {
        (void)dealer_.send(zmq::buffer(small), zmq::send_flags::none);
        zmq::message_t reply;
        (void)dealer_.recv(reply);
      }
      count += 16;
      now = steady::now();
    }
    return static_cast<double>(count) / std::chrono::duration<double>(now - t0).count();
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t dealer_;
};

using ref_t = prsgd::wire::remote_ref<bench_actor>;

bool check(const prsgd::expected<int>& r) {
  if (!r) {
    std::fprintf(stderr, "ask failed: %s\n", r.error().message().c_str());
    return false;
  }
  return true;
}

// One caller: ask and wait, repeat. Calls per second over about `d`.
double sync_rate(const ref_t& ref, steady::duration d) {
  std::uint64_t count = 0;
  const auto t0 = steady::now();
  const auto end = t0 + d;
  auto now = t0;
  while (now < end) {
    for (int i = 0; i < 16; ++i) {
      if (!check(ref.ask(&bench_actor::ping, i).get())) {
        std::exit(1);
      }
    }
    count += 16;
    now = steady::now();
  }
  return static_cast<double>(count) / std::chrono::duration<double>(now - t0).count();
}

// One caller: `window` asks in flight, wait for all, repeat (Ray's `ray.get([a.f.remote() ...])`).
std::uint64_t async_calls(const ref_t& ref, int window, steady::time_point end) {
  std::uint64_t count = 0;
  std::vector<prsgd::future<int>> futures;
  futures.reserve(static_cast<std::size_t>(window));
  while (steady::now() < end) {
    for (int i = 0; i < window; ++i) {
      futures.push_back(ref.ask(&bench_actor::ping, i));
    }
    for (auto& f : futures) {
      if (!check(f.get())) {
        std::exit(1);
      }
    }
    futures.clear();
    count += static_cast<std::uint64_t>(window);
  }
  return count;
}

double async_rate(const std::vector<ref_t>& refs, int window, double seconds) {
  std::vector<std::uint64_t> counts(refs.size(), 0);
  std::vector<std::thread> callers;
  const auto t0 = steady::now();
  const steady::time_point end =
      t0 + std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(seconds));
  for (std::size_t i = 0; i < refs.size(); ++i) {
    callers.emplace_back([&, i] { counts[i] = async_calls(refs[i], window, end); });
  }
  for (auto& t : callers) {
    t.join();
  }
  const double secs = std::chrono::duration<double>(steady::now() - t0).count();
  std::uint64_t total = 0;
  for (const auto c : counts) {
    total += c;
  }
  return static_cast<double>(total) / secs;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  double seconds = 1.0;
  int n = 2;
  int window = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--serve") {
      return serve(std::stoi(value));
    }
    if (flag == "--rounds") {
      rounds = std::stoi(value);
    } else if (flag == "--seconds") {
      seconds = std::stod(value);
    } else if (flag == "--n") {
      n = std::stoi(value);
    } else if (flag == "--window") {
      window = std::stoi(value);
    }
  }
  signal(SIGPIPE, SIG_IGN);
  child server = start_server("/proc/self/exe", n);
  std::vector<server_node> servers;
  std::string raw_endpoint;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), server.from_child) != nullptr) {
    std::istringstream line(buf);
    std::string word;
    line >> word;
    if (word == "NODE") {
      server_node s;
      line >> s.name >> s.endpoint >> s.actor_id;
      servers.push_back(s);
    } else if (word == "RAW") {
      line >> raw_endpoint;
    } else if (word == "READY") {
      break;
    }
  }
  if (static_cast<int>(servers.size()) != n || raw_endpoint.empty()) {
    std::fprintf(stderr, "server process did not start\n");
    return 1;
  }

  prsgd::wire::remote_registry reg;
  register_types(reg);
  prsgd::config cfg;
  cfg.threads = 2;
  cfg.compute_threads = 1;
  std::vector<ref_t> refs;
  {
    prsgd::actor_system system{cfg};
    std::vector<std::unique_ptr<prsgd::wire::node>> nodes;
    for (int i = 0; i < n; ++i) {
      prsgd::wire::node_config ncfg;
      ncfg.name = "caller-" + std::to_string(i);
      auto node = prsgd::wire::node::make(system, reg, ncfg, zmq_factory());
      if (!node) {
        std::fprintf(stderr, "node: %s\n", node.error().message().c_str());
        return 1;
      }
      if (auto c = (*node)->connect(servers[static_cast<std::size_t>(i)].name,
                                    servers[static_cast<std::size_t>(i)].endpoint);
          !c) {
        std::fprintf(stderr, "connect: %s\n", c.error().message().c_str());
        return 1;
      }
      refs.push_back((*node)->ref<bench_actor>(prsgd::wire::actor_address{
          servers[static_cast<std::size_t>(i)].name, servers[static_cast<std::size_t>(i)].actor_id}));
      nodes.push_back(std::move(*node));
    }
    // Warm-up: connections up, first asks answered.
    for (const auto& r : refs) {
      for (int i = 0; i < 200; ++i) {
        if (!check(r.ask(&bench_actor::ping, i).get(std::chrono::seconds(30)))) {
          return 1;
        }
      }
    }
    std::printf("wire_bench: %d rounds of %.1f s, n = %d, window = %d, two processes over tcp://127.0.0.1\n", rounds,
                seconds, n, window);
    raw_client raw_zmq(raw_endpoint);
    std::vector<double> raw;
    std::vector<double> sync;
    std::vector<double> async1;
    std::vector<double> asyncn;
    std::vector<double> sync_ratio;
    // 1:1 sync vs raw: `pairs` alternating slices of `slice` each per round (the load on this machine
    // changes within seconds, so short alternating slices compare like with like); ratio = median of
    // the per-slice-pair ratios.
    const int pairs = 10;
    const auto slice = std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(seconds / pairs));
    for (int r = 0; r < rounds; ++r) {
      std::vector<double> raw_slices;
      std::vector<double> sync_slices;
      for (int k = 0; k < pairs; ++k) {
        raw_slices.push_back(raw_zmq.run(slice));
        sync_slices.push_back(sync_rate(refs[0], slice));
        sync_ratio.push_back(sync_slices.back() / raw_slices.back());
      }
      raw.push_back(median(raw_slices));
      sync.push_back(median(sync_slices));
      async1.push_back(async_rate({refs[0]}, window, seconds));
      asyncn.push_back(async_rate(refs, window, seconds));
      std::printf("  round %d: raw %.0f rt/s, 1:1 sync %.0f/s (%.2fx raw), 1:1 async %.0f/s, %d:%d async %.0f/s\n", r,
                  raw.back(), sync.back(), sync.back() / raw.back(), async1.back(), n, n, asyncn.back());
      std::fflush(stdout);
    }
    std::printf(
        "median: raw zmq round trips %.0f/s | 1:1 sync %.0f calls/s (ratio of medians %.2f, median of "
        "%zu slice-pair ratios %.2f) | 1:1 async %.0f calls/s | %d:%d async %.0f calls/s\n",
        median(raw), median(sync), median(sync) / median(raw), sync_ratio.size(), median(sync_ratio), median(async1), n,
        n, median(asyncn));
    for (auto& node : nodes) {
      node->stop();
    }
    system.shutdown(std::chrono::seconds(2));
  }
  close(server.to_child);
  int status = 0;
  waitpid(server.pid, &status, 0);
  return 0;
}
