// SPDX-License-Identifier: Apache-2.0
// Embedding the prsgd actor runtime in your own C++ service: the whole Ray-style API in one file.
//
//   1. an actor_system (a thread pool for actors, a compute pool, a timer thread);
//   2. spawn<T>(args...) returning a typed handle, actor_ref<T>, optionally under a name;
//   3. tell (fire and forget) and ask (returns prsgd::future<R>);
//   4. future::get(timeout) from non-actor code, future::then(...) from inside an actor;
//   5. errors as values: expected<T> holds a value or a prsgd::error (not_found, actor_dead, timeout, ...);
//   6. a periodic timer, and a CPU-heavy job on the compute pool (run_compute).
//
// Build: link prsgd::runtime (see CMakeLists.txt beside this file). Run: ./prsgd_embed_example.
// It prints one line per step and exits 0 only if every step gave the expected answer.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "prsgd/runtime/runtime.hpp"

namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------------
// Actors. Derive from prsgd::actor; any constructor works. Public methods are the message handlers:
// the runtime calls them on the actor's strand, one message at a time, so actor state needs no locks.
// ---------------------------------------------------------------------------------------------------

/// A tiny stock-keeping service: item name -> count.
class inventory final : public prsgd::actor {
 public:
  explicit inventory(std::string shop) : shop_(std::move(shop)) {}

  /// Adds `n` of `item` (used with tell: nobody waits for a reply).
  void add(const std::string& item, int n) { stock_[item] += n; }

  /// Returns the count of `item`, or not_found. Returning expected<R> makes `ask` give future<R>,
  /// and the error arrives in the future as a value: no exception crosses the actor boundary.
  prsgd::expected<int> count(const std::string& item) const {
    auto it = stock_.find(item);
    if (it == stock_.end()) {
      return prsgd::fail(prsgd::errc::not_found, shop_ + " has no " + item);
    }
    return it->second;
  }

  /// Stops this actor after this handler: later messages bounce, later asks get actor_dead.
  void close() { quit(); }

 private:
  std::string shop_;
  std::map<std::string, int> stock_;
};

/// A front desk that talks to the inventory actor: shows ask + then *inside* an actor, and a reply
/// that is delivered later (response_promise) once the inventory answered.
class front_desk final : public prsgd::actor {
 public:
  explicit front_desk(prsgd::actor_ref<inventory> stock) : stock_(std::move(stock)) {}

  /// Restocks `item` and replies with a sentence about the new count.
  prsgd::response_promise<std::string> restock(std::string item, int n) {
    auto reply = make_response_promise<std::string>();
    stock_.tell(&inventory::add, item, n);  // same sender, same target: delivered in order
    // Inside an actor never block on get(): chain with then(). The continuation runs later, on this
    // actor's strand (so it may touch members), exactly once, with a value or an error.
    stock_.ask(&inventory::count, item).within(1s).then([reply, item](prsgd::expected<int> r) mutable {
      if (!r) {
        reply.deliver(r.error());  // pass the error on as a value
        return;
      }
      reply.deliver("front desk: we now have " + std::to_string(*r) + " " + item);
    });
    return reply;  // the asker's future completes when `reply.deliver(...)` runs
  }

 private:
  prsgd::actor_ref<inventory> stock_;
};

/// Ticks on a periodic timer; `wait_ticks(n)` replies once n ticks have happened.
class heartbeat final : public prsgd::actor {
 public:
  explicit heartbeat(prsgd::clock_source::duration period) : period_(period) {}

  void on_start() override {
    // Timers run their callback on this actor's strand; they die with the actor.
    timer_ = schedule_periodic(period_, [this] {
      ++ticks_;
      answer_waiters();
    });
  }

  /// Replies with the tick count once it reaches `n`.
  prsgd::response_promise<int> wait_ticks(int n) {
    auto p = make_response_promise<int>();
    waiters_.emplace_back(n, p);
    answer_waiters();
    return p;
  }

  /// Cancels the timer; returns the ticks counted so far.
  int stop_ticking() {
    (void)cancel_timer(timer_);
    return ticks_;
  }

 private:
  void answer_waiters() {
    std::erase_if(waiters_, [this](auto& w) { return ticks_ >= w.first && w.second.deliver(ticks_); });
  }

  prsgd::clock_source::duration period_;
  prsgd::timer_id timer_{};
  int ticks_ = 0;
  std::vector<std::pair<int, prsgd::response_promise<int>>> waiters_;
};

/// Offloads CPU-heavy work to the compute pool so the actor threads stay responsive.
class prime_counter final : public prsgd::actor {
 public:
  /// Counts the primes below `n` on the compute pool and replies with the count.
  prsgd::response_promise<int> count_below(int n) {
    auto reply = make_response_promise<int>();
    run_compute(
        [n] {  // runs on a compute thread: touch no actor state here
          std::vector<bool> composite(static_cast<std::size_t>(n), false);
          int primes = 0;
          for (int i = 2; i < n; ++i) {
            if (!composite[static_cast<std::size_t>(i)]) {
              ++primes;
              for (long long j = static_cast<long long>(i) * i; j < n; j += i) {
                composite[static_cast<std::size_t>(j)] = true;
              }
            }
          }
          return primes;
        },
        [reply](prsgd::expected<int> r) mutable {  // back on this actor's strand
          reply.deliver(std::move(r));             // a throw in the job would arrive here as handler_failed
        });
    return reply;
  }
};

int failures = 0;

/// Unwraps a spawn or lookup result; an example's main may simply give up on failure.
template <class T>
prsgd::actor_ref<T> must(prsgd::expected<prsgd::actor_ref<T>> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "%s failed: %s\n", what, r.error().message().c_str());
    std::exit(1);
  }
  return *std::move(r);
}

/// Returns the error code's name, or "a value?!" when there is none (a step expected an error).
template <class T>
std::string code_of(const prsgd::expected<T>& r) {
  return r ? std::string{"a value?!"} : std::string{prsgd::to_string(r.error().code)};
}

/// Prints `line` and counts a failure unless `ok`.
void report(bool ok, const std::string& line) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", line.c_str());
  if (!ok) {
    ++failures;
  }
}

}  // namespace

int main() {
  // 1. The system: 2 actor threads (a Boost.Asio pool) and 1 compute thread. Every thread is listed
  //    in prsgd/runtime/threads.hpp. The destructor shuts down too; we call shutdown() to see the result.
  prsgd::actor_system system{prsgd::config{.threads = 2, .compute_threads = 1}};

  // 2. spawn<T>(args...) constructs T from (copies of) args and returns expected<actor_ref<T>>.
  //    named{...} registers it, so other parts of the service can lookup<T>("shop") later.
  prsgd::expected<prsgd::actor_ref<inventory>> spawned =
      system.spawn<inventory>(prsgd::named{"shop"}, std::string{"the corner shop"});
  prsgd::actor_ref<inventory> shop = must(std::move(spawned), "spawn inventory");

  // 3. tell: fire and forget. The handler runs later on the actor's strand; messages from one sender
  //    to one actor arrive in order.
  shop.tell(&inventory::add, std::string{"apples"}, 5);
  shop.tell(&inventory::add, std::string{"apples"}, 2);

  // 4. ask + get(timeout): from main (never from an actor) block for the reply, an expected<int>.
  prsgd::expected<int> apples = shop.ask(&inventory::count, std::string{"apples"}).get(5s);
  report(apples && *apples == 7, "ask/get: " + std::to_string(apples ? *apples : -1) + " apples");

  // 5. Errors are values: an unknown item is a not_found error in the future, not an exception.
  auto pears = shop.ask(&inventory::count, std::string{"pears"}).get(5s);
  report(!pears && pears.error().code == prsgd::errc::not_found,
         "unknown item: " + (pears ? std::string{"a value?!"} : pears.error().message()));

  // 6. An actor asking an actor: then() inside front_desk, a deferred reply to us.
  auto found = must(system.lookup<inventory>("shop"), "lookup");  // as another component finds it
  auto desk = must(system.spawn<front_desk>(found), "spawn front_desk");
  auto sentence = desk.ask(&front_desk::restock, std::string{"apples"}, 3).get(5s);
  report(sentence && *sentence == "front desk: we now have 10 apples",
         "ask/then: " + (sentence ? *sentence : sentence.error().message()));

  // 7. A timer: the heartbeat ticks every 10 ms; wait for 3 ticks.
  auto beat = must(system.spawn<heartbeat>(prsgd::clock_source::duration{10ms}), "spawn heartbeat");
  auto ticks = beat.ask(&heartbeat::wait_ticks, 3).get(5s);
  report(ticks && *ticks >= 3,
         "timer: " +
             (ticks ? "woke after " + std::to_string(*ticks >= 3 ? 3 : *ticks) + "+ heartbeat ticks" : code_of(ticks)));

  // 8. A deadline is an error value too: 1000 ticks will not happen within 50 ms.
  auto too_slow = beat.ask(&heartbeat::wait_ticks, 1000).get(50ms);
  report(!too_slow && too_slow.error().code == prsgd::errc::timeout, "get(50ms) on a slow reply: " + code_of(too_slow));
  (void)beat.ask(&heartbeat::stop_ticking).get(5s);

  // 9. The compute pool: a sieve runs off the actor threads; the reply arrives like any other.
  auto primes_actor = must(system.spawn<prime_counter>(), "spawn prime_counter");
  auto primes = primes_actor.ask(&prime_counter::count_below, 100'000).get(30s);
  report(primes && *primes == 9592, "run_compute: " + std::to_string(primes ? *primes : -1) + " primes below 100000");

  // 10. A stopped actor: tell it to quit, then ask. Its mail bounces and the ask gets actor_dead.
  shop.tell(&inventory::close);
  auto after_close = shop.ask(&inventory::count, std::string{"apples"}).get(5s);
  report(!after_close && after_close.error().code == prsgd::errc::actor_dead,
         "ask a stopped actor: " + code_of(after_close));
  // The front desk still runs, and its own ask now reports the dead inventory as a value.
  auto desk_after = desk.ask(&front_desk::restock, std::string{"apples"}, 1).get(5s);
  report(!desk_after && desk_after.error().code == prsgd::errc::actor_dead,
         "front desk after the shop closed: " + code_of(desk_after));

  // 11. Shutdown: drains queued mail, stops every actor (on_stop), joins the threads.
  const bool drained = system.shutdown(5s);
  report(drained && system.actor_count() == 0, std::string{"shutdown: "} + (drained ? "drained" : "hit the deadline") +
                                                   ", " + std::to_string(system.actor_count()) + " actors left");

  std::printf("%s\n",
              failures == 0 ? "embed example: all steps gave the expected answer" : "embed example: some steps FAILED");
  return failures == 0 ? 0 : 1;
}
