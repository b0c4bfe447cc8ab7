// SPDX-License-Identifier: Apache-2.0
// 10,000 actors exchange 1,000,000 messages; every message must arrive exactly once.
// PRSGD_STRESS_SCALE (e.g. 0.1) shrinks the message count; ASan builds default to 0.2.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "prsgd/runtime/runtime.hpp"

namespace prsgd {
namespace {

using namespace std::chrono_literals;

double scale() {
  if (const char* s = std::getenv("PRSGD_STRESS_SCALE")) {
    return std::stod(s);
  }
#if defined(__SANITIZE_ADDRESS__)
  return 0.2;
#else
  return 1.0;
#endif
}

/// Test probe shared by all actors: counts deliveries and wakes the test at the target.
struct probe {
  std::atomic<std::int64_t> delivered{0};
  std::int64_t target = 0;
  std::mutex mu;
  std::condition_variable cv;
  void one() {
    if (delivered.fetch_add(1) + 1 == target) {
      std::lock_guard lock{mu};
      cv.notify_all();
    }
  }
};

class node final : public actor {
 public:
  node(std::shared_ptr<probe> p, std::shared_ptr<const std::vector<actor_ref<node>>> peers)
      : probe_(std::move(p)), peers_(std::move(peers)) {}

  /// Sends `count` messages with ids first..first+count-1 to pseudo-random peers.
  void kick(std::uint64_t first, std::uint64_t count, std::uint64_t seed) {
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (std::uint64_t i = 0; i < count; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      (*peers_)[x % peers_->size()].tell(&node::receive, first + i, id().local);
    }
  }
  void receive(std::uint64_t msg, std::uint64_t from) {
    // Per-sender FIFO: ids from one sender to one receiver only grow.
    auto& last = last_from_[from];
    if (msg < last) {
      ++fifo_violations_;
    }
    last = msg;
    got_.push_back(msg);
    probe_->one();
  }
  std::vector<std::uint64_t> received() const { return got_; }
  int fifo_violations() const { return fifo_violations_; }

 private:
  std::shared_ptr<probe> probe_;
  std::shared_ptr<const std::vector<actor_ref<node>>> peers_;
  std::vector<std::uint64_t> got_;
  std::unordered_map<std::uint64_t, std::uint64_t> last_from_;
  int fifo_violations_ = 0;
};

TEST(RuntimeStressTest, TenThousandActorsDeliverEveryMessageExactlyOnce) {
  constexpr std::size_t actors = 10'000;
  const auto per_actor = static_cast<std::uint64_t>(100 * scale());
  const std::uint64_t total = per_actor * actors;
  ASSERT_GT(total, 0U);

  config cfg;
  cfg.threads = 2;
  cfg.compute_threads = 1;
  actor_system sys{cfg};
  auto p = std::make_shared<probe>();
  p->target = static_cast<std::int64_t>(total);
  // Spawn first, then publish the complete peer list (read-only) through a shared_ptr.
  auto shared_peers = std::make_shared<std::vector<actor_ref<node>>>();
  std::shared_ptr<const std::vector<actor_ref<node>>> view = shared_peers;
  for (std::size_t i = 0; i < actors; ++i) {
    auto r = sys.spawn<node>(p, view);
    ASSERT_TRUE(r.has_value()) << r.error().message();
    shared_peers->push_back(*r);
  }
  ASSERT_EQ(sys.actor_count(), actors);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < actors; ++i) {
    (*shared_peers)[i].tell(&node::kick, i * per_actor, per_actor, std::uint64_t{i + 1});
  }
  {
    std::unique_lock lock{p->mu};
    ASSERT_TRUE(p->cv.wait_for(lock, 120s, [&] { return p->delivered.load() >= p->target; }))
        << "delivered " << p->delivered.load() << " of " << total;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::uint8_t> seen(total, 0);
  std::uint64_t count = 0;
  int fifo = 0;
  for (auto& n : *shared_peers) {
    auto got = n.ask(&node::received).get(60s);
    ASSERT_TRUE(got.has_value()) << got.error().message();
    for (auto id : *got) {
      ASSERT_LT(id, total);
      ASSERT_EQ(seen[id], 0) << "message " << id << " delivered twice";
      seen[id] = 1;
      ++count;
    }
    fifo += *n.ask(&node::fifo_violations).get(60s);
  }
  EXPECT_EQ(count, total);
  EXPECT_EQ(fifo, 0);
  EXPECT_EQ(p->delivered.load(), static_cast<std::int64_t>(total));
  std::printf("stress: %llu messages over %zu actors in %.3f s (%.0f msg/s)\n", static_cast<unsigned long long>(total),
              actors, secs, static_cast<double>(total) / secs);
  EXPECT_TRUE(sys.shutdown(60s));
  EXPECT_EQ(sys.actor_count(), 0U);
}

}  // namespace
}  // namespace prsgd
