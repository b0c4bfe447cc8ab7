// SPDX-License-Identifier: Apache-2.0
// prsgd transport vs raw cppzmq, in one process over tcp://127.0.0.1 (sender and receiver are threads):
//   (1) payload throughput for 16 MiB and 64 MiB frames (window of 4 in flight, 1-byte ack per message),
//   (2) small-message round-trip latency (64 bytes), p50/p99,
// with receive memory either "fresh" (glibc default: every large frame lands in new mmap'd pages) or
// "reuse" (retain_freed_memory_for_large_frames(): freed receive buffers are reused). The mode is
// process-wide, so run the binary once per mode:
//   transport_bench --memory fresh|reuse [--rounds 5] [--messages 16]
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "prsgd/transport/zmq_transport.hpp"

namespace {

using steady = std::chrono::steady_clock;
constexpr int window = 4;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  if (v.empty()) {
    return 0.0;
  }
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

void free_vec(void* /*data*/, void* /*hint*/) {}

// ---- raw cppzmq ----

double raw_throughput(std::size_t bytes, int messages, const std::vector<char>& payload) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind("tcp://127.0.0.1:*");
  const std::string ep = router.get(zmq::sockopt::last_endpoint);
  std::thread receiver([&] {
    for (int i = 0; i < messages; ++i) {
      zmq::message_t id;
      zmq::message_t body;
      (void)router.recv(id);
      (void)router.recv(body);
      if (body.size() != bytes) {
        std::fprintf(stderr, "raw: wrong size\n");
      }
      (void)router.send(id, zmq::send_flags::sndmore);
      (void)router.send(zmq::buffer("a", 1), zmq::send_flags::none);
    }
  });
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.connect(ep);
  const auto t0 = steady::now();
  int sent = 0;
  int acked = 0;
  while (acked < messages) {
    while (sent < messages && sent - acked < window) {
      zmq::message_t m(const_cast<char*>(payload.data()), bytes, &free_vec, nullptr);  // zero-copy
      (void)dealer.send(m, zmq::send_flags::none);
      ++sent;
    }
    zmq::message_t ack;
    (void)dealer.recv(ack);
    ++acked;
  }
  const double secs = std::chrono::duration<double>(steady::now() - t0).count();
  receiver.join();
  return static_cast<double>(bytes) * messages / secs / 1e9;
}

// `shared_context`: both ends in one zmq context, so one libzmq I/O thread serves both TCP ends (it sees
// the other side's bytes in the same epoll_wait). Otherwise each end has its own context and I/O thread,
// as two processes (and two prsgd transports) do.
std::vector<double> raw_latency(int iterations, bool shared_context) {
  zmq::context_t ctx(1);
  zmq::context_t client_ctx_own(1);
  zmq::context_t& client_ctx = shared_context ? ctx : client_ctx_own;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind("tcp://127.0.0.1:*");
  const std::string ep = router.get(zmq::sockopt::last_endpoint);
  std::thread echo([&] {
    for (int i = 0; i < iterations + 10; ++i) {
      zmq::message_t id;
      zmq::message_t body;
      (void)router.recv(id);
      (void)router.recv(body);
      (void)router.send(id, zmq::send_flags::sndmore);
      (void)router.send(body, zmq::send_flags::none);
    }
  });
  zmq::socket_t dealer(client_ctx, zmq::socket_type::dealer);
  dealer.connect(ep);
  std::vector<double> rtts;
  const std::string small(64, 'p');
  for (int i = 0; i < iterations + 10; ++i) {
    const auto t0 = steady::now();
    (void)dealer.send(zmq::buffer(small), zmq::send_flags::none);
    zmq::message_t reply;
    (void)dealer.recv(reply);
    if (i >= 10) {
      rtts.push_back(std::chrono::duration<double, std::micro>(steady::now() - t0).count());
    }
  }
  echo.join();
  return rtts;
}

// ---- prsgd transport ----

struct waiter {
  std::mutex mutex;
  std::condition_variable cv;
  int count = 0;
  void bump() {
    std::lock_guard lock(mutex);
    ++count;
    cv.notify_all();
  }
  void wait_for_count(int n) {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return count >= n; });
  }
};

prsgd::transport_config bench_config(const char* name, bool reuse) {
  prsgd::transport_config cfg;
  cfg.node_name = name;
  cfg.reuse_receive_memory = reuse;
  return cfg;
}

double prsgd_throughput(std::size_t bytes, int messages, const std::shared_ptr<const std::vector<char>>& payload,
                        bool reuse) {
  prsgd::transport* server_ptr = nullptr;
  auto server = prsgd::zmq_transport::make(
      bench_config("server", reuse), {[&](prsgd::peer_id peer, prsgd::multipart msg) {
                                        if (msg.size() != 1 || msg[0].size() != bytes) {
                                          std::fprintf(stderr, "prsgd: wrong size\n");
                                        }
                                        msg.clear();  // release the receive buffer before acking, like the raw receiver
                                        (void)server_ptr->send(peer, {prsgd::frame::copy("a")});
                                      },
                                      {}});
  server_ptr = server->get();
  auto ep = (*server)->bind("tcp://127.0.0.1:*");
  waiter acks;
  auto client = prsgd::zmq_transport::make(bench_config("client", reuse),
                                           {[&](prsgd::peer_id, prsgd::multipart) { acks.bump(); }, {}});
  auto peer = (*client)->connect(*ep, {});
  const prsgd::frame f = prsgd::frame::share(std::shared_ptr<const void>(payload), payload->data(), bytes);
  const auto t0 = steady::now();
  int sent = 0;
  while (true) {
    int acked = 0;
    {
      std::lock_guard lock(acks.mutex);
      acked = acks.count;
    }
    if (acked >= messages) {
      break;
    }
    while (sent < messages && sent - acked < window) {
      (void)(*client)->send(*peer, {f});
      ++sent;
    }
    acks.wait_for_count(acked + 1);
  }
  const double secs = std::chrono::duration<double>(steady::now() - t0).count();
  (*client)->stop();
  (*server)->stop();
  return static_cast<double>(bytes) * messages / secs / 1e9;
}

// `inline_reply`: the client sends the next ping from its receive handler (on the I/O thread), as an
// actor system that replies from the delivery thread would; otherwise the main thread sends each ping
// and waits for the pong (send() crosses threads through the queue + eventfd).
std::vector<double> prsgd_latency(int iterations, bool inline_reply) {
  prsgd::transport* server_ptr = nullptr;
  auto server = prsgd::zmq_transport::make(
      bench_config("server", true),
      {[&](prsgd::peer_id peer, prsgd::multipart msg) { (void)server_ptr->send(peer, std::move(msg)); }, {}});
  server_ptr = server->get();
  auto ep = (*server)->bind("tcp://127.0.0.1:*");
  std::vector<double> rtts;
  rtts.reserve(static_cast<std::size_t>(iterations));
  waiter pongs;
  steady::time_point t0;
  const prsgd::frame small = prsgd::frame::copy(std::string(64, 'p'));
  prsgd::transport* client_ptr = nullptr;
  prsgd::peer_id peer = 0;
  auto client = prsgd::zmq_transport::make(
      bench_config("client", true), {[&](prsgd::peer_id, prsgd::multipart) {
                                       const auto now = steady::now();
                                       int done = 0;
                                       {
                                         std::lock_guard lock(pongs.mutex);
                                         done = ++pongs.count;
                                         if (done > 10) {
                                           rtts.push_back(std::chrono::duration<double, std::micro>(now - t0).count());
                                         }
                                         // In handler mode the main thread only waits for the last pong; waking it on
                                         // every pong would add a futex wake-up and a context switch per round trip
                                         // that raw ping-pong does not pay.
                                         if (!inline_reply || done >= iterations + 10) {
                                           pongs.cv.notify_all();
                                         }
                                       }
                                       if (inline_reply && done < iterations + 10) {
                                         t0 = steady::now();
                                         (void)client_ptr->send(peer, {small});
                                       }
                                     },
                                     {}});
  client_ptr = client->get();
  peer = *(*client)->connect(*ep, {});
  if (inline_reply) {
    t0 = steady::now();
    (void)(*client)->send(peer, {small});
    pongs.wait_for_count(iterations + 10);
  } else {
    for (int i = 0; i < iterations + 10; ++i) {
      t0 = steady::now();
      (void)(*client)->send(peer, {small});
      pongs.wait_for_count(i + 1);
    }
  }
  (*client)->stop();
  (*server)->stop();
  return rtts;
}

}  // namespace

int main(int argc, char** argv) {
  bool reuse = true;
  int rounds = 5;
  int messages = 16;
  std::string only = "all";  // all | throughput | latency
  int iterations = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--memory") {
      reuse = value == "reuse";
    } else if (flag == "--rounds") {
      rounds = std::stoi(value);
    } else if (flag == "--messages") {
      messages = std::stoi(value);
    } else if (flag == "--only") {
      only = value;
    } else if (flag == "--iterations") {
      iterations = std::stoi(value);
    }
  }
  if (reuse) {
    prsgd::retain_freed_memory_for_large_frames();
  }
  std::printf("memory mode: %s, rounds %d, messages per round %d, window %d\n", reuse ? "reuse" : "fresh", rounds,
              messages, window);
  for (const std::size_t mib : {16, 64}) {
    if (only.starts_with("latency")) {
      break;
    }
    const std::size_t bytes = mib << 20;
    auto payload = std::make_shared<const std::vector<char>>(bytes, 'm');
    std::vector<double> raw;
    std::vector<double> ours;
    for (int r = 0; r < rounds; ++r) {  // interleaved so machine noise hits both alike
      raw.push_back(raw_throughput(bytes, messages, *payload));
      ours.push_back(prsgd_throughput(bytes, messages, payload, reuse));
    }
    const double mr = median(raw);
    const double mo = median(ours);
    std::printf("throughput %3zu MiB: raw cppzmq %.2f GB/s, prsgd %.2f GB/s, ratio %.2f\n", mib, mr, mo, mo / mr);
  }
  if (only == "throughput") {
    return 0;
  }
  std::vector<double> raw_p50;
  std::vector<double> raw2_p50;
  std::vector<double> inline_p50;
  std::vector<double> cross_p50;
  std::vector<double> raw_p99;
  std::vector<double> raw2_p99;
  std::vector<double> inline_p99;
  std::vector<double> cross_p99;
  std::vector<double> inline_ratio;  // per round, vs raw with one context per end
  std::vector<double> cross_ratio;
  for (int r = 0; r < rounds; ++r) {
    // `--only latency-raw|latency-raw2|latency-handler|latency-thread` runs one variant (for strace/perf).
    const auto want = [&](const char* v) { return only == "all" || only == "latency" || only == v; };
    auto a = want("latency-raw") ? raw_latency(iterations, true) : std::vector<double>{};
    auto a2 = want("latency-raw2") ? raw_latency(iterations, false) : std::vector<double>{};
    auto b = want("latency-handler") ? prsgd_latency(iterations, true) : std::vector<double>{};
    auto c = want("latency-thread") ? prsgd_latency(iterations, false) : std::vector<double>{};
    raw_p50.push_back(percentile(a, 0.5));
    raw2_p50.push_back(percentile(a2, 0.5));
    inline_p50.push_back(percentile(b, 0.5));
    cross_p50.push_back(percentile(c, 0.5));
    raw_p99.push_back(percentile(a, 0.99));
    raw2_p99.push_back(percentile(a2, 0.99));
    inline_p99.push_back(percentile(b, 0.99));
    cross_p99.push_back(percentile(c, 0.99));
    if (!a2.empty()) {
      inline_ratio.push_back(percentile(b, 0.5) / percentile(a2, 0.5));
      cross_ratio.push_back(percentile(c, 0.5) / percentile(a2, 0.5));
    }
  }
  const double raw1 = median(raw_p50);
  const double raw2 = median(raw2_p50);
  std::printf(
      "latency 64 B RTT p50: raw shared ctx %.1f us, raw ctx per end %.1f us, "
      "prsgd (reply from handler) %.1f us, prsgd (send from another thread) %.1f us\n",
      raw1, raw2, median(inline_p50), median(cross_p50));
  std::printf(
      "latency ratio p50 vs raw shared ctx: handler %.2f, thread %.2f; vs raw ctx per end: handler %.2f, "
      "thread %.2f (median of per-round ratios: %.2f, %.2f)\n",
      median(inline_p50) / raw1, median(cross_p50) / raw1, median(inline_p50) / raw2, median(cross_p50) / raw2,
      median(inline_ratio), median(cross_ratio));
  std::printf(
      "latency 64 B RTT p99: raw shared %.1f us, raw per end %.1f us, prsgd (handler) %.1f us, "
      "prsgd (thread) %.1f us\n",
      median(raw_p99), median(raw2_p99), median(inline_p99), median(cross_p99));
  return 0;
}
