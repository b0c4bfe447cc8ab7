// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "prsgd/common/clock.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/common/mutex.hpp"
#include "prsgd/runtime/actor_id.hpp"
#include "prsgd/runtime/detail/message.hpp"
#include "prsgd/runtime/detail/system_engine.hpp"
#include "prsgd/runtime/detail/unique_function.hpp"
#include "prsgd/runtime/policy.hpp"

namespace prsgd::runtime::detail {

/// Is one actor's runtime shell: its lock-free mailbox, scheduled flag, current instance, timers,
/// monitors and supervision state. Survives restarts (same id, same mailbox).
/// Thread contract: `enqueue`, `id`, `alive`, `add_watcher`/`remove_watcher` are thread-safe; every
/// other member runs only on the cell's strand (inside `run`, one thread at a time), or on the
/// shutdown thread after all actor threads have been joined (`kill`).
class cell : public std::enable_shared_from_this<cell> {
 public:
  cell(std::shared_ptr<system_engine> engine, actor_id id, spawn_options opts, actor_factory factory,
       std::type_index type);
  cell(const cell&) = delete;
  cell& operator=(const cell&) = delete;
  ~cell();

  /// Returns the actor's id.
  [[nodiscard]] actor_id id() const noexcept { return id_; }
  /// Returns the registry name ("" if anonymous).
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Returns the dynamic type the actor was spawned as.
  [[nodiscard]] std::type_index type() const noexcept { return type_; }
  /// Returns the system engine.
  [[nodiscard]] system_engine& engine() const noexcept { return *engine_; }
  /// Returns false once the actor terminated (its mailbox is closed).
  [[nodiscard]] bool alive() const noexcept { return alive_.load(std::memory_order_acquire); }

  /// Appends `m` to the mailbox and schedules the actor if idle. Thread-safe.
  /// Returns false (after calling `m->bounce`) when the actor is dead.
  bool enqueue(message_ptr m);

  /// Builds the first instance (spawning thread, before the cell is visible). Fails with handler_failed.
  [[nodiscard]] expected<void> construct_first();
  /// Schedules the first run, which calls `on_start` (spawn only, after registration).
  void start();
  /// Handles up to `max_throughput` messages. Called by the executor only.
  void run();
  /// Terminates immediately with `reason` (shutdown sweep; no actor thread may run).
  void kill(const error& reason);

  // --- strand-only ---
  /// Returns the current instance (nullptr while restarting or after termination).
  [[nodiscard]] actor* instance() const noexcept { return instance_.get(); }
  /// Returns the restart count of this cell; continuations of an older incarnation are dropped.
  [[nodiscard]] std::uint64_t incarnation() const noexcept { return incarnation_; }
  /// Stops the actor after the current message with `reason` (errc::none = normal exit).
  void request_stop(error reason);
  /// Arms a one-shot or periodic timer whose `fn` runs on this strand. Returns its id.
  timer_id add_timer(clock_source::duration delay, bool periodic, unique_function<void()> fn);
  /// Cancels a timer; returns false when it is unknown or already fired (one-shot).
  bool cancel_timer(timer_id id);
  /// Runs timer `id` if still armed for incarnation `incarnation` (the timer's message calls this).
  void fire_timer(std::uint64_t id, std::uint64_t incarnation);
  /// Returns the number of armed timers.
  [[nodiscard]] std::size_t timer_count() const noexcept { return timers_.size(); }

  // --- thread-safe monitor bookkeeping ---
  /// Registers `watcher` for a down message; if this actor is already dead, sends it at once.
  void add_watcher(const std::shared_ptr<cell>& watcher);
  /// Unregisters `watcher`.
  void remove_watcher(const cell& watcher);

 private:
  struct timer_entry {
    unique_function<void()> fn;
    bool periodic = false;
    clock_source::duration period{};
    std::shared_ptr<std::atomic<bool>> cancelled;
  };

  bool push(message* m) noexcept;
  message* take_all() noexcept;
  void handle_failure(const error& reason);
  void do_restart();
  void cancel_all_timers();
  void destroy_instance(const error& reason);
  void terminate(const error& reason);
  void bounce_list(message* head, const error& why) noexcept;

  std::shared_ptr<system_engine> engine_;
  const actor_id id_;
  const std::string name_;
  const restart_policy policy_;
  actor_factory factory_;
  const std::type_index type_;

  // Mailbox: a lock-free LIFO stack of producers' pushes (CAF-style); the consumer takes everything
  // at once and reverses it into `cache_`, which keeps FIFO order per sender.
  std::atomic<message*> head_{nullptr};
  // Starts true: nothing may run the cell before `start()` (a named cell is visible to lookups while
  // its instance is still being constructed).
  std::atomic<bool> scheduled_{true};
  std::atomic<bool> alive_{true};
  message* cache_ = nullptr;  // strand-only, FIFO
  message* cache_tail_ = nullptr;

  // Strand-only state.
  std::unique_ptr<actor> instance_;
  std::uint64_t incarnation_ = 0;
  bool started_ = false;  // on_start ran for the current instance
  bool stop_requested_ = false;
  error stop_reason_;
  bool restart_pending_ = false;                    // waiting for the backoff timer; scheduled_ stays true meanwhile
  clock_source::duration restart_delay_{};          // armed at the very end of run(), after the last state access
  std::vector<clock_source::time_point> failures_;  // restart times within the window
  std::uint64_t next_timer_ = 1;
  std::unordered_map<std::uint64_t, timer_entry> timers_;

  // Monitors.
  mutex watchers_mu_;
  std::vector<std::weak_ptr<cell>> watchers_ PRSGD_GUARDED_BY(watchers_mu_);
  bool terminated_ PRSGD_GUARDED_BY(watchers_mu_) = false;
  error exit_reason_ PRSGD_GUARDED_BY(watchers_mu_);
};

}  // namespace prsgd::runtime::detail
