// SPDX-License-Identifier: Apache-2.0
#include "prsgd/runtime/actor_system.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>

#include "engine.hpp"
#include "prsgd/common/check.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/runtime/detail/promise_state.hpp"
#include "prsgd/runtime/deterministic_system.hpp"
#include "tls.hpp"

namespace prsgd {
namespace runtime::detail {

namespace {
void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}
}  // namespace

cell* current_cell() noexcept { return tls::current; }

cell* constructing_cell() noexcept { return tls::constructing; }

continuation_target current_target() {
  continuation_target t;
  if (cell* c = tls::current) {
    t.owner = c->weak_from_this();
    t.has_owner = true;
    t.incarnation = c->incarnation();
  }
  return t;
}

void dispatch_continuation(system_engine& engine, const continuation_target& target, unique_function<void()> job) {
  if (!target.has_owner) {
    engine.post(std::move(job));
    return;
  }
  auto owner = target.owner.lock();
  if (!owner) {
    return;  // the actor that registered the continuation is gone
  }
  owner->enqueue(make_message([inc = target.incarnation, j = std::move(job)](cell& self) mutable {
    if (self.incarnation() == inc && self.instance() != nullptr) {
      j();
    }
  }));
}

bool wait_for(system_engine& engine, std::mutex& mu, std::condition_variable& cv, clock_source::duration timeout,
              const std::atomic<bool>& ready_flag, const std::function<bool()>& ready) {
  if (engine.manual()) {
    for (;;) {
      {
        std::lock_guard lock{mu};
        if (ready()) {
          return true;
        }
      }
      if (!engine.run_one()) {
        std::lock_guard lock{mu};
        return ready();
      }
    }
  }
  // Bounded poll before sleeping (config::wait_spin). `ready_flag` is only a hint: it is set under `mu`
  // right after the result is stored, and the result is read under `mu` in any case. When the poll
  // ends without it, the wait below is the plain condition-variable protocol (predicate checked under
  // `mu` before blocking, completion stores and notifies under `mu`), so no wake-up can be lost.
  if (const clock_source::duration spin = std::min(engine.wait_spin(), timeout);
      spin > clock_source::duration::zero()) {
    // At most cores - 1 threads of the process poll at once (at least 1), so one CPU core stays for the
    // threads that produce the results: with two callers polling on a 2-core machine under SCHED_FIFO,
    // neither I/O thread could run until a poll budget ran out.
    static const int max_spinners = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1);
    static std::atomic<int> spinners{0};
    const bool may_spin = spinners.fetch_add(1, std::memory_order_relaxed) < max_spinners;
    const bool got = may_spin && spin_until_set(ready_flag, spin);
    spinners.fetch_sub(1, std::memory_order_relaxed);
    if (got) {
      return true;
    }
  }
  std::unique_lock lock{mu};
  return cv.wait_for(lock, timeout, ready);
}

bool spin_until_set(const std::atomic<bool>& flag, clock_source::duration budget) {
  using steady = std::chrono::steady_clock;
  const auto deadline = steady::now() + budget;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (flag.load(std::memory_order_acquire)) {
        return true;
      }
      cpu_relax();
    }
    if (steady::now() >= deadline) {
      return flag.load(std::memory_order_acquire);
    }
    // Give the CPU core to any runnable thread (under SCHED_FIFO a polling thread is otherwise never
    // preempted by its peers): often the one that will complete the result. Pausing without yielding
    // cut 2:2 async calls/s by ~10 % in wire_bench (bench/wire/HISTORY.md).
    sched_yield();
  }
}

}  // namespace runtime::detail

// -------------------------------------------------------------------------------------------------

namespace {
// config::wait_spin, or PRSGD_WAIT_SPIN_US (microseconds) when that is set to a number.
clock_source::duration wait_spin_of(const config& cfg) {
  if (const char* env = std::getenv("PRSGD_WAIT_SPIN_US"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long us = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && us >= 0) {
      return std::chrono::microseconds(us);
    }
    PRSGD_LOG(warn, "runtime") << "ignoring PRSGD_WAIT_SPIN_US='" << env << "' (not a number of microseconds)";
  }
  return cfg.wait_spin;
}

std::shared_ptr<runtime::detail::system_engine> make_pool(const config& cfg) {
  auto engine = std::make_shared<runtime::detail::pool_engine>(cfg.node, cfg.threads, cfg.compute_threads,
                                                               cfg.max_throughput, wait_spin_of(cfg));
  engine->start();
  return engine;
}
}  // namespace

actor_system::actor_system(config cfg) : actor_system(make_pool(cfg), cfg.shutdown_deadline) {}

actor_system::actor_system(std::shared_ptr<runtime::detail::system_engine> engine, clock_source::duration deadline)
    : engine_(std::move(engine)), default_deadline_(deadline) {
  engine_->bind_facade(this);
}

actor_system::~actor_system() {
  shutdown(default_deadline_);
  engine_->bind_facade(nullptr);
}

expected<actor_addr> actor_system::lookup_addr(std::string_view name) const {
  auto c = engine_->lookup(name);
  if (!c) {
    return fail(errc::not_found, "no actor named '" + std::string{name} + "'");
  }
  return actor_addr{std::move(c)};
}

std::size_t actor_system::actor_count() const { return engine_->actor_count(); }

node_id actor_system::node() const noexcept { return engine_->node(); }

clock_source::time_point actor_system::now() const noexcept { return engine_->time().now(); }

bool actor_system::await_all_stopped(clock_source::duration timeout) {
  PRSGD_CHECK(!engine_->on_actor_thread()) << "await_all_stopped() on an actor thread would deadlock";
  return engine_->await_all_stopped(timeout);
}

bool actor_system::shutdown(clock_source::duration deadline) {
  PRSGD_CHECK(!engine_->on_actor_thread()) << "shutdown() on an actor thread would deadlock";
  return engine_->shutdown(deadline);
}

void actor_system::stop_now() { static_cast<void>(shutdown(clock_source::duration::zero())); }

// -------------------------------------------------------------------------------------------------

namespace {
runtime::detail::manual_engine& manual(const std::shared_ptr<runtime::detail::system_engine>& engine) {
  return static_cast<runtime::detail::manual_engine&>(*engine);
}
}  // namespace

deterministic_system::deterministic_system(node_id node)
    : actor_system(std::make_shared<runtime::detail::manual_engine>(node), std::chrono::hours(1)) {}

deterministic_system::~deterministic_system() = default;

bool deterministic_system::dispatch_one() { return engine()->run_one(); }

std::size_t deterministic_system::dispatch_all(std::size_t limit) {
  std::size_t n = 0;
  while (n < limit && engine()->run_one()) {
    ++n;
  }
  return n;
}

std::size_t deterministic_system::advance(clock_source::duration d) { return manual(engine()).advance(d); }

std::size_t deterministic_system::advance_and_dispatch(clock_source::duration d) {
  static_cast<void>(advance(d));
  return dispatch_all();
}

std::size_t deterministic_system::pending() const { return manual(engine()).pending(); }

std::size_t deterministic_system::timer_count() const { return manual(engine()).timer_count(); }

fake_clock& deterministic_system::clock() noexcept { return manual(engine()).fake(); }

}  // namespace prsgd
