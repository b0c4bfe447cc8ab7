// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "prsgd/common/clock.hpp"
#include "prsgd/runtime/detail/cell.hpp"
#include "prsgd/runtime/detail/system_engine.hpp"

namespace prsgd::runtime::detail {

/// Orders callbacks by deadline. Not thread-safe (the owner locks).
class timer_queue {
 public:
  /// Adds `fn` to fire at `when`.
  void add(clock_source::time_point when, unique_function<void()> fn) { q_.emplace(when, std::move(fn)); }
  /// Removes and returns every callback due at `now`, earliest first.
  std::vector<unique_function<void()>> take_due(clock_source::time_point now) {
    std::vector<unique_function<void()>> out;
    while (!q_.empty() && q_.begin()->first <= now) {
      out.push_back(std::move(q_.begin()->second));
      q_.erase(q_.begin());
    }
    return out;
  }
  /// Returns the earliest deadline, if any.
  [[nodiscard]] std::optional<clock_source::time_point> next() const {
    if (q_.empty()) {
      return std::nullopt;
    }
    return q_.begin()->first;
  }
  /// Returns the number of armed callbacks.
  [[nodiscard]] std::size_t size() const noexcept { return q_.size(); }
  /// Drops every callback.
  void clear() { q_.clear(); }

 private:
  std::multimap<clock_source::time_point, unique_function<void()>> q_;
};

/// Implements the actor table, name registry and shutdown protocol; executors derive from it.
/// Thread-safe.
class engine_base : public system_engine {
 public:
  engine_base(node_id node, std::size_t max_throughput);
  ~engine_base() override;

  [[nodiscard]] node_id node() const noexcept override { return node_; }
  [[nodiscard]] actor_system& facade() noexcept override { return *facade_; }
  void bind_facade(actor_system* facade) noexcept override { facade_ = facade; }
  [[nodiscard]] bool shutting_down() const noexcept override { return shutting_down_.load(std::memory_order_acquire); }
  [[nodiscard]] std::size_t max_throughput() const noexcept override { return max_throughput_; }
  [[nodiscard]] bool halted() const noexcept override { return halted_.load(std::memory_order_acquire); }

  [[nodiscard]] expected<std::shared_ptr<cell>> spawn_cell(actor_factory factory, spawn_options opts,
                                                           std::type_index type) override;
  [[nodiscard]] std::shared_ptr<cell> lookup(std::string_view name) const override;
  [[nodiscard]] std::shared_ptr<cell> find(std::uint64_t local) const override;
  [[nodiscard]] std::size_t actor_count() const override;
  void on_terminated(cell& c) override;
  bool shutdown(clock_source::duration deadline) override;

 protected:
  /// Waits until the table is empty or the real-time deadline passes (pool) / dispatches (manual).
  virtual bool wait_drained(clock_source::duration timeout) = 0;
  /// Stops and joins every runtime thread; afterwards `post` runs jobs inline.
  virtual void stop_executor() = 0;
  /// Runs or drops whatever the stopped executor still holds.
  virtual void flush_executor() = 0;

  /// Returns the number of live actors.
  [[nodiscard]] std::size_t live() const noexcept { return live_.load(std::memory_order_acquire); }
  /// Blocks (real time) until no actor is alive or `timeout` passed.
  bool wait_empty(clock_source::duration timeout);
  /// Returns every live cell.
  [[nodiscard]] std::vector<std::shared_ptr<cell>> snapshot() const;

 private:
  // The actor table is sharded so that spawning threads and terminating actors rarely contend.
  struct shard {
    mutable std::mutex mu;
    std::unordered_map<std::uint64_t, std::shared_ptr<cell>> cells;
  };
  static constexpr std::size_t shard_count = 16;
  shard& shard_of(std::uint64_t local) noexcept { return shards_[local % shard_count]; }
  void erase_cell(const cell& c);

  std::array<shard, shard_count> shards_;
  std::atomic<std::size_t> live_{0};
  std::mutex count_mu_;
  std::condition_variable empty_cv_;
  mutable std::mutex names_mu_;
  const node_id node_;
  const std::size_t max_throughput_;
  actor_system* facade_ = nullptr;
  std::unordered_map<std::string, std::shared_ptr<cell>> names_;
  std::atomic<std::uint64_t> next_local_{0};
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> halted_{false};
  std::mutex shutdown_mu_;
  std::optional<bool> shutdown_result_;
};

/// Runs actors on a Boost.Asio io_context with N threads, compute jobs on a second io_context, and
/// timers on one timer thread (see threads.hpp).
class pool_engine final : public engine_base {
 public:
  pool_engine(node_id node, std::size_t threads, std::size_t compute_threads, std::size_t max_throughput,
              clock_source::duration wait_spin = clock_source::duration::zero());
  ~pool_engine() override;

  [[nodiscard]] clock_source::duration wait_spin() const noexcept override { return wait_spin_; }

  [[nodiscard]] const clock_source& time() const noexcept override { return steady_clock_source::instance(); }
  void schedule(std::shared_ptr<cell> c, bool fair) override;
  void post(unique_function<void()> job) override;
  void post_compute(unique_function<void()> job) override;
  void add_timer(clock_source::time_point when, unique_function<void()> fn) override;
  [[nodiscard]] bool manual() const noexcept override { return false; }
  bool run_one() override { return false; }
  [[nodiscard]] bool on_actor_thread() const noexcept override;
  bool await_all_stopped(clock_source::duration timeout) override;

  /// Starts the threads (after construction, so threads see a complete object).
  void start();

 protected:
  bool wait_drained(clock_source::duration timeout) override;
  void stop_executor() override;
  void flush_executor() override;

 private:
  void post_cell(std::shared_ptr<cell> c);
  void run_cell(const std::shared_ptr<cell>& c);
  void timer_loop();

  const std::size_t threads_n_;
  const std::size_t compute_n_;
  const clock_source::duration wait_spin_;
  boost::asio::io_context ioc_;
  boost::asio::io_context compute_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> compute_work_;
  std::vector<std::thread> threads_;
  std::vector<std::thread> compute_threads_;
  std::thread timer_thread_;
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  timer_queue timers_;
  bool timer_stop_ = false;
  std::atomic<bool> stopped_{false};
  bool joined_ = false;
};

/// Runs everything on the caller's thread when a test dispatches; time is a fake clock.
/// Not thread-safe.
class manual_engine final : public engine_base {
 public:
  explicit manual_engine(node_id node);
  ~manual_engine() override;

  [[nodiscard]] const clock_source& time() const noexcept override { return clock_; }
  void schedule(std::shared_ptr<cell> c, bool fair) override;
  void post(unique_function<void()> job) override;
  void post_compute(unique_function<void()> job) override;
  void add_timer(clock_source::time_point when, unique_function<void()> fn) override;
  [[nodiscard]] bool manual() const noexcept override { return true; }
  bool run_one() override;
  [[nodiscard]] bool on_actor_thread() const noexcept override { return false; }
  bool await_all_stopped(clock_source::duration timeout) override;

  /// Advances the clock and fires due timers; returns how many fired.
  std::size_t advance(clock_source::duration d);
  /// Returns queued jobs.
  [[nodiscard]] std::size_t pending() const noexcept { return jobs_.size(); }
  /// Returns armed timers.
  [[nodiscard]] std::size_t timer_count() const noexcept { return timers_.size(); }
  /// Returns the fake clock.
  fake_clock& fake() noexcept { return clock_; }

 protected:
  bool wait_drained(clock_source::duration timeout) override;
  void stop_executor() override;
  void flush_executor() override;

 private:
  fake_clock clock_;
  std::deque<unique_function<void()>> jobs_;
  timer_queue timers_;
  bool stopped_ = false;
};

}  // namespace prsgd::runtime::detail
