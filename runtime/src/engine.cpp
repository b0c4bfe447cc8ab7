// SPDX-License-Identifier: Apache-2.0
#include "engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>

#include "prsgd/common/log.hpp"
#include "prsgd/runtime/threads.hpp"

namespace prsgd::runtime::detail {
namespace {

// Set on every actor thread of a pool_engine: which pool, and its LIFO "run next" slot.
thread_local pool_engine* tls_pool = nullptr;
thread_local std::shared_ptr<cell> tls_runnext;

// Hands a chain of cells that wake each other (ping-pong) to the same thread without a queue
// round trip, but at most this many in a row before the next one goes to the shared queue.
constexpr int max_runnext_chain = 16;

void name_thread(const std::string& name) {
  // Linux limits thread names to 15 characters.
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

void run_guarded(unique_function<void()>& job, const char* what) noexcept {
  try {
    job();
  } catch (const std::exception& e) {
    PRSGD_LOG(error, "runtime") << what << " threw: " << e.what();
  } catch (...) {
    PRSGD_LOG(error, "runtime") << what << " threw a non-std exception";
  }
}

std::size_t default_threads(std::size_t n) {
  if (n != 0) {
    return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 2 : hw;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// engine_base

engine_base::engine_base(node_id node, std::size_t max_throughput)
    : node_(node), max_throughput_(max_throughput == 0 ? 1 : max_throughput) {}

engine_base::~engine_base() = default;

expected<std::shared_ptr<cell>> engine_base::spawn_cell(actor_factory factory, spawn_options opts,
                                                        std::type_index type) {
  if (shutting_down()) {
    return fail(errc::shutting_down, "spawn refused: actor system is shutting down");
  }
  const actor_id id{node_, next_local_.fetch_add(1, std::memory_order_relaxed) + 1};
  auto c = std::make_shared<cell>(shared_from_this(), id, std::move(opts), std::move(factory), type);
  if (!c->name().empty()) {
    std::lock_guard lock{names_mu_};
    if (names_.contains(c->name())) {
      return fail(errc::already_exists, "an actor named '" + c->name() + "' already exists");
    }
    names_.emplace(c->name(), c);
  }
  bool refused = false;
  {
    // Checked under the shard lock: shutdown sets the flag before it snapshots the shards, so a
    // cell is either refused here or seen (and stopped) by the shutdown.
    auto& sh = shard_of(id.local);
    std::lock_guard lock{sh.mu};
    if (shutting_down()) {
      refused = true;
    } else {
      sh.cells.emplace(id.local, c);
      live_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  if (refused) {
    erase_cell(*c);
    return fail(errc::shutting_down, "spawn refused: actor system is shutting down");
  }
  if (auto ok = c->construct_first(); !ok) {
    erase_cell(*c);
    return std::move(ok).error();
  }
  c->start();
  return c;
}

std::shared_ptr<cell> engine_base::lookup(std::string_view name) const {
  std::lock_guard lock{names_mu_};
  auto it = names_.find(std::string{name});
  return it == names_.end() ? nullptr : it->second;
}

std::shared_ptr<cell> engine_base::find(std::uint64_t local) const {
  const auto& sh = shards_[local % shard_count];
  std::lock_guard lock{sh.mu};
  auto it = sh.cells.find(local);
  return it == sh.cells.end() ? nullptr : it->second;
}

std::size_t engine_base::actor_count() const { return live(); }

void engine_base::on_terminated(cell& c) { erase_cell(c); }

void engine_base::erase_cell(const cell& c) {
  // Destroy the references after unlocking: a cell's destructor must never run under a table lock.
  std::shared_ptr<cell> by_name;
  std::shared_ptr<cell> by_id;
  if (!c.name().empty()) {
    std::lock_guard lock{names_mu_};
    if (auto it = names_.find(c.name()); it != names_.end() && it->second.get() == &c) {
      by_name = std::move(it->second);
      names_.erase(it);
    }
  }
  {
    auto& sh = shard_of(c.id().local);
    std::lock_guard lock{sh.mu};
    if (auto it = sh.cells.find(c.id().local); it != sh.cells.end() && it->second.get() == &c) {
      by_id = std::move(it->second);
      sh.cells.erase(it);
    }
  }
  if (by_id && live_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard lock{count_mu_};
    empty_cv_.notify_all();
  }
}

bool engine_base::wait_empty(clock_source::duration timeout) {
  std::unique_lock lock{count_mu_};
  return empty_cv_.wait_for(lock, timeout, [this] { return live() == 0; });
}

std::vector<std::shared_ptr<cell>> engine_base::snapshot() const {
  std::vector<std::shared_ptr<cell>> out;
  out.reserve(live());
  for (const auto& sh : shards_) {
    std::lock_guard lock{sh.mu};
    for (const auto& [local, c] : sh.cells) {
      out.push_back(c);
    }
  }
  return out;
}

bool engine_base::shutdown(clock_source::duration deadline) {
  std::lock_guard guard{shutdown_mu_};
  if (shutdown_result_) {
    return *shutdown_result_;
  }
  shutting_down_.store(true, std::memory_order_release);
  std::vector<std::shared_ptr<cell>> cells = snapshot();
  PRSGD_LOG(debug, "runtime") << "shutdown: draining " << cells.size() << " actors";
  // The stop marker goes behind the mail already queued, so that mail is still handled.
  for (auto& c : cells) {
    c->enqueue(make_message([](cell& self) {
      self.request_stop(error{errc::shutting_down, "actor system shutdown"});
    }));
  }
  cells.clear();
  const bool drained = wait_drained(deadline);
  halted_.store(true, std::memory_order_release);
  stop_executor();
  cells = snapshot();
  if (!cells.empty()) {
    PRSGD_LOG(warn, "runtime") << "shutdown: " << cells.size() << " actors did not drain in time; stopping hard";
  }
  for (auto& c : cells) {
    c->kill(error{errc::shutting_down, "hard stop at the shutdown deadline"});
  }
  cells.clear();
  flush_executor();
  shutdown_result_ = drained;
  return drained;
}

// ---------------------------------------------------------------------------------------------
// pool_engine

pool_engine::pool_engine(node_id node, std::size_t threads, std::size_t compute_threads, std::size_t max_throughput,
                         clock_source::duration wait_spin)
    : engine_base(node, max_throughput),
      threads_n_(default_threads(threads)),
      compute_n_(default_threads(compute_threads)),
      wait_spin_(std::max(wait_spin, clock_source::duration::zero())) {}

pool_engine::~pool_engine() {
  if (!joined_) {
    stop_executor();
  }
}

void pool_engine::start() {
  work_.emplace(boost::asio::make_work_guard(ioc_));
  compute_work_.emplace(boost::asio::make_work_guard(compute_));
  for (std::size_t i = 0; i < threads_n_; ++i) {
    threads_.emplace_back([this, i] {
      name_thread(threads::actor_thread_prefix + std::to_string(i));
      tls_pool = this;
      ioc_.run();
      tls_runnext.reset();
      tls_pool = nullptr;
    });
  }
  for (std::size_t i = 0; i < compute_n_; ++i) {
    compute_threads_.emplace_back([this, i] {
      name_thread(threads::compute_thread_prefix + std::to_string(i));
      compute_.run();
    });
  }
  timer_thread_ = std::thread([this] {
    name_thread(threads::timer_thread_name);
    timer_loop();
  });
}

bool pool_engine::on_actor_thread() const noexcept { return tls_pool == this; }

void pool_engine::schedule(std::shared_ptr<cell> c, bool fair) {
  if (stopped_.load(std::memory_order_acquire)) {
    return;  // threads are gone; the shutdown sweep kills every cell still alive
  }
  if (!fair && tls_pool == this) {
    if (tls_runnext) {
      post_cell(std::move(tls_runnext));
    }
    tls_runnext = std::move(c);
    return;
  }
  post_cell(std::move(c));
}

void pool_engine::post_cell(std::shared_ptr<cell> c) {
  boost::asio::post(ioc_, [this, c = std::move(c)] { run_cell(c); });
}

void pool_engine::run_cell(const std::shared_ptr<cell>& c) {
  c->run();
  for (int chain = 0; tls_runnext; ++chain) {
    std::shared_ptr<cell> next = std::move(tls_runnext);
    tls_runnext.reset();
    if (chain >= max_runnext_chain) {
      post_cell(std::move(next));
      break;
    }
    next->run();
  }
}

void pool_engine::post(unique_function<void()> job) {
  if (stopped_.load(std::memory_order_acquire)) {
    run_guarded(job, "posted job");
    return;
  }
  boost::asio::post(ioc_, [this, j = std::move(job)]() mutable {
    run_guarded(j, "posted job");
    if (tls_runnext) {
      std::shared_ptr<cell> next = std::move(tls_runnext);
      tls_runnext.reset();
      run_cell(next);
    }
  });
}

void pool_engine::post_compute(unique_function<void()> job) {
  if (stopped_.load(std::memory_order_acquire)) {
    return;
  }
  boost::asio::post(compute_, [j = std::move(job)]() mutable { run_guarded(j, "compute job"); });
}

void pool_engine::add_timer(clock_source::time_point when, unique_function<void()> fn) {
  {
    std::lock_guard lock{timer_mu_};
    if (timer_stop_) {
      return;
    }
    timers_.add(when, std::move(fn));
  }
  timer_cv_.notify_one();
}

void pool_engine::timer_loop() {
  std::unique_lock lock{timer_mu_};
  while (!timer_stop_) {
    auto next = timers_.next();
    if (!next) {
      timer_cv_.wait(lock);
      continue;
    }
    const auto t = time().now();
    if (*next > t) {
      timer_cv_.wait_until(
          lock, std::chrono::steady_clock::time_point{
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(next->time_since_epoch())});
      continue;
    }
    auto due = timers_.take_due(t);
    lock.unlock();
    for (auto& f : due) {
      run_guarded(f, "timer callback");
    }
    due.clear();
    lock.lock();
  }
}

bool pool_engine::wait_drained(clock_source::duration timeout) { return await_all_stopped(timeout); }

bool pool_engine::await_all_stopped(clock_source::duration timeout) { return wait_empty(timeout); }

void pool_engine::stop_executor() {
  if (joined_) {
    return;
  }
  {
    std::lock_guard lock{timer_mu_};
    timer_stop_ = true;
  }
  timer_cv_.notify_all();
  if (timer_thread_.joinable()) {
    timer_thread_.join();
  }
  compute_work_.reset();
  compute_.stop();
  for (auto& t : compute_threads_) {
    t.join();
  }
  work_.reset();
  ioc_.stop();
  for (auto& t : threads_) {
    t.join();
  }
  stopped_.store(true, std::memory_order_release);
  joined_ = true;
}

void pool_engine::flush_executor() {
  // Handlers still queued hold cells (which hold this engine): run them now; cells are dead, so
  // this only completes continuations.
  ioc_.restart();
  ioc_.poll();
  compute_.restart();
  timer_queue dropped;
  {
    std::lock_guard lock{timer_mu_};
    std::swap(dropped, timers_);
  }
}

// ---------------------------------------------------------------------------------------------
// manual_engine

manual_engine::manual_engine(node_id node) : engine_base(node, 1) {}

manual_engine::~manual_engine() = default;

void manual_engine::schedule(std::shared_ptr<cell> c, bool fair) {
  static_cast<void>(fair);
  if (stopped_) {
    return;
  }
  jobs_.emplace_back([c = std::move(c)] { c->run(); });
}

void manual_engine::post(unique_function<void()> job) {
  if (stopped_) {
    run_guarded(job, "posted job");
    return;
  }
  jobs_.push_back(std::move(job));
}

void manual_engine::post_compute(unique_function<void()> job) {
  if (stopped_) {
    return;
  }
  jobs_.push_back(std::move(job));
}

void manual_engine::add_timer(clock_source::time_point when, unique_function<void()> fn) {
  if (stopped_) {
    return;
  }
  timers_.add(when, std::move(fn));
}

bool manual_engine::run_one() {
  if (jobs_.empty()) {
    return false;
  }
  auto job = std::move(jobs_.front());
  jobs_.pop_front();
  run_guarded(job, "job");
  return true;
}

std::size_t manual_engine::advance(clock_source::duration d) {
  clock_.advance(d);
  std::size_t fired = 0;
  for (;;) {
    auto due = timers_.take_due(clock_.now());
    if (due.empty()) {
      return fired;
    }
    for (auto& f : due) {
      run_guarded(f, "timer callback");
      ++fired;
    }
  }
}

bool manual_engine::await_all_stopped(clock_source::duration timeout) {
  static_cast<void>(timeout);
  for (;;) {
    if (live() == 0) {
      return true;
    }
    if (!run_one()) {
      return actor_count() == 0;
    }
  }
}

bool manual_engine::wait_drained(clock_source::duration timeout) {
  // A zero deadline is a hard stop: nothing more is dispatched.
  if (timeout <= clock_source::duration::zero()) {
    return actor_count() == 0;
  }
  return await_all_stopped(timeout);
}

void manual_engine::stop_executor() { stopped_ = true; }

void manual_engine::flush_executor() {
  // Cells are dead now, so queued runs are no-ops; posted continuations still run.
  while (!jobs_.empty()) {
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    run_guarded(job, "job");
  }
  timers_.clear();
}

}  // namespace prsgd::runtime::detail
