// SPDX-License-Identifier: Apache-2.0
#include "prsgd/runtime/detail/cell.hpp"

#include <algorithm>
#include <exception>
#include <utility>

#include "prsgd/common/check.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/runtime/actor.hpp"
#include "tls.hpp"

namespace prsgd::runtime::detail {
namespace {

// Marks a closed mailbox; never dereferenced.
alignas(message) char closed_tag;
message* closed() noexcept { return reinterpret_cast<message*>(&closed_tag); }  // NOLINT

// Restores the thread's current cell when a handler batch ends (also on exceptions).
class current_scope {
 public:
  explicit current_scope(cell* c) noexcept : prev_(tls::current) { tls::current = c; }
  current_scope(const current_scope&) = delete;
  current_scope& operator=(const current_scope&) = delete;
  ~current_scope() { tls::current = prev_; }

 private:
  cell* prev_;
};

error dead_error(const system_engine& engine, actor_id id) {
  if (engine.shutting_down()) {
    return error{errc::shutting_down, "actor system is shutting down"};
  }
  return error{errc::actor_dead, "actor " + to_string(id) + " is dead"};
}

std::string what_of(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Arms one firing of timer `id`; periodic timers re-arm themselves from the timer thread.
void arm_timer(system_engine& engine, std::weak_ptr<cell> weak, std::uint64_t id, std::uint64_t inc,
               clock_source::time_point when, std::shared_ptr<std::atomic<bool>> cancelled,
               clock_source::duration period);

}  // namespace

// Runs a timer callback on the strand if the timer is still armed for this incarnation.
class timer_fire final : public message {
 public:
  timer_fire(std::uint64_t id, std::uint64_t inc) : id_(id), inc_(inc) {}
  void run(cell& target) override { target.fire_timer(id_, inc_); }
  [[nodiscard]] bool is_system() const noexcept override { return true; }

 private:
  std::uint64_t id_;
  std::uint64_t inc_;
};

namespace {
void arm_timer(system_engine& engine, std::weak_ptr<cell> weak, std::uint64_t id, std::uint64_t inc,
               clock_source::time_point when, std::shared_ptr<std::atomic<bool>> cancelled,
               clock_source::duration period) {
  auto* core_ptr = &engine;
  engine.add_timer(
      when, [core_ptr, weak = std::move(weak), id, inc, when, cancelled = std::move(cancelled), period]() mutable {
        if (cancelled->load(std::memory_order_acquire)) {
          return;
        }
        auto c = weak.lock();
        if (!c) {
          return;
        }
        c->enqueue(std::make_unique<timer_fire>(id, inc));
        if (period > clock_source::duration::zero()) {
          arm_timer(*core_ptr, std::move(weak), id, inc, when + period, std::move(cancelled), period);
        }
      });
}
}  // namespace

cell::cell(std::shared_ptr<system_engine> engine, actor_id id, spawn_options opts, actor_factory factory,
           std::type_index type)
    : engine_(std::move(engine)),
      id_(id),
      name_(std::move(opts.name)),
      policy_(opts.restart),
      factory_(std::move(factory)),
      type_(type) {}

cell::~cell() {
  // Normally terminate() emptied everything; a cell dropped before start (failed spawn) still may
  // hold mail.
  message* rest = head_.exchange(closed());
  if (rest != closed()) {
    bounce_list(rest, error{errc::actor_dead, "actor destroyed"});
  }
  bounce_list(cache_, error{errc::actor_dead, "actor destroyed"});
}

bool cell::push(message* m) noexcept {
  message* h = head_.load(std::memory_order_relaxed);
  do {
    if (h == closed()) {
      return false;
    }
    m->next_ = h;
  } while (!head_.compare_exchange_weak(h, m, std::memory_order_seq_cst, std::memory_order_relaxed));
  return true;
}

bool cell::enqueue(message_ptr m) {
  if (!push(m.get())) {
    m->bounce(dead_error(*engine_, id_));
    return false;
  }
  static_cast<void>(m.release());
  if (!scheduled_.exchange(true, std::memory_order_seq_cst)) {
    engine_->schedule(shared_from_this(), false);
  }
  return true;
}

message* cell::take_all() noexcept {
  message* h = head_.load(std::memory_order_acquire);
  if (h == nullptr || h == closed()) {
    return nullptr;
  }
  h = head_.exchange(nullptr, std::memory_order_seq_cst);
  message* rev = nullptr;
  while (h != nullptr) {
    message* n = h->next_;
    h->next_ = rev;
    rev = h;
    h = n;
  }
  return rev;
}

void cell::bounce_list(message* head, const error& why) noexcept {
  while (head != nullptr && head != closed()) {
    message_ptr m{head};
    head = head->next_;
    m->bounce(why);
  }
}

expected<void> cell::construct_first() {
  tls::constructing_scope scope{this};
  try {
    instance_ = factory_();
  } catch (...) {
    return fail(errc::handler_failed, "actor constructor threw: " + what_of(std::current_exception()));
  }
  return {};
}

void cell::start() {
  // scheduled_ has been true since construction, so this is the first and only schedule until
  // run() clears the flag.
  engine_->schedule(shared_from_this(), false);
}

void cell::run() {
  if (!alive()) {
    return;
  }
  // Keeps this cell alive even if terminate() drops the last table reference mid-batch.
  auto keep = shared_from_this();
  {
    current_scope scope{this};
    if (restart_pending_) {
      restart_pending_ = false;
      do_restart();
    }
    std::size_t budget = engine_->max_throughput();
    while (alive() && !restart_pending_) {
      if (!started_ && instance_) {
        started_ = true;
        try {
          instance_->on_start();
        } catch (...) {
          handle_failure(error{errc::handler_failed, "on_start threw: " + what_of(std::current_exception())});
        }
      } else {
        if (budget == 0 || engine_->halted()) {
          break;
        }
        if (cache_ == nullptr) {
          cache_ = take_all();
          if (cache_ == nullptr) {
            break;
          }
        }
        message_ptr m{cache_};
        cache_ = cache_->next_;
        m->next_ = nullptr;
        --budget;
        try {
          m->run(*this);
        } catch (...) {
          m.reset();
          handle_failure(error{errc::handler_failed, what_of(std::current_exception())});
        }
      }
      if (stop_requested_) {
        terminate(stop_reason_);
      }
    }
  }
  if (restart_pending_ && alive() && !engine_->halted()) {
    // Armed last: once the timer can fire, another thread may run this cell.
    std::weak_ptr<cell> weak = keep;
    auto& engine = *engine_;
    engine.add_timer(engine.time().now() + restart_delay_, [weak] {
      if (auto c = weak.lock()) {
        c->engine().schedule(c, true);
      }
    });
    return;
  }
  if (!alive() || restart_pending_ || engine_->halted()) {
    // Dead; or the shutdown sweep is about to kill us.
    return;
  }
  auto nonempty = [this] {
    message* h = head_.load(std::memory_order_seq_cst);
    return h != nullptr && h != closed();
  };
  if (cache_ != nullptr || nonempty() || (!started_ && instance_)) {
    engine_->schedule(std::move(keep), true);
    return;
  }
  scheduled_.store(false, std::memory_order_seq_cst);
  if (nonempty() && !scheduled_.exchange(true, std::memory_order_seq_cst)) {
    engine_->schedule(std::move(keep), true);
  }
}

void cell::request_stop(error reason) {
  if (!stop_requested_) {
    stop_requested_ = true;
    stop_reason_ = std::move(reason);
  }
}

void cell::handle_failure(const error& reason) {
  PRSGD_LOG(warn, "runtime") << "actor " << id_ << (name_.empty() ? "" : " '" + name_ + "'")
                             << " failed: " << reason.message();
  switch (policy_.mode) {
    case restart_mode::resume: return;
    case restart_mode::never: request_stop(reason); return;
    case restart_mode::on_failure: break;
  }
  if (stop_requested_) {
    return;
  }
  const auto t = engine_->time().now();
  std::erase_if(failures_, [&](clock_source::time_point f) { return f + policy_.window <= t; });
  if (static_cast<int>(failures_.size()) >= policy_.max_restarts) {
    request_stop(error{errc::handler_failed, "restart limit reached (" + std::to_string(policy_.max_restarts) +
                                                 " within the window); last failure: " + reason.context});
    return;
  }
  failures_.push_back(t);
  destroy_instance(reason);
  ++incarnation_;
  clock_source::duration backoff = policy_.backoff;
  for (std::size_t i = 1; i < failures_.size() && backoff < policy_.max_backoff; ++i) {
    backoff *= 2;
  }
  backoff = std::min(backoff, std::max(policy_.max_backoff, policy_.backoff));
  if (backoff <= clock_source::duration::zero()) {
    do_restart();
    return;
  }
  restart_pending_ = true;
  restart_delay_ = backoff;  // run() arms the timer when it returns
}

void cell::do_restart() {
  PRSGD_LOG(info, "runtime") << "restarting actor " << id_ << " (incarnation " << incarnation_ << ")";
  {
    tls::constructing_scope scope{this};
    try {
      instance_ = factory_();
    } catch (...) {
      instance_.reset();
      request_stop(error{errc::handler_failed, "restart: constructor threw: " + what_of(std::current_exception())});
      return;
    }
  }
  started_ = false;  // run() calls on_start next
}

timer_id cell::add_timer(clock_source::duration delay, bool periodic, unique_function<void()> fn) {
  const std::uint64_t id = next_timer_++;
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  if (periodic && delay <= clock_source::duration::zero()) {
    delay = clock_source::duration{1};
  }
  timers_.emplace(id, timer_entry{std::move(fn), periodic, delay, cancelled});
  arm_timer(*engine_, weak_from_this(), id, incarnation_, engine_->time().now() + delay, std::move(cancelled),
            periodic ? delay : clock_source::duration::zero());
  return timer_id{id};
}

bool cell::cancel_timer(timer_id id) {
  auto it = timers_.find(id.value);
  if (it == timers_.end()) {
    return false;
  }
  it->second.cancelled->store(true, std::memory_order_release);
  timers_.erase(it);
  return true;
}

void cell::fire_timer(std::uint64_t id, std::uint64_t inc) {
  if (inc != incarnation_ || instance_ == nullptr) {
    return;
  }
  auto it = timers_.find(id);
  if (it == timers_.end()) {
    return;
  }
  if (!it->second.periodic) {
    auto fn = std::move(it->second.fn);
    timers_.erase(it);
    fn();
    return;
  }
  // The callback may cancel its own timer: run a moved-out copy, then put it back if still armed.
  auto fn = std::move(it->second.fn);
  fn();
  if (auto again = timers_.find(id); again != timers_.end()) {
    again->second.fn = std::move(fn);
  }
}

void cell::cancel_all_timers() {
  for (auto& [id, t] : timers_) {
    t.cancelled->store(true, std::memory_order_release);
  }
  timers_.clear();
}

void cell::destroy_instance(const error& reason) {
  cancel_all_timers();
  if (!instance_) {
    return;
  }
  try {
    instance_->on_stop(reason);
  } catch (...) {
    PRSGD_LOG(warn, "runtime") << "actor " << id_ << ": on_stop threw: " << what_of(std::current_exception());
  }
  instance_.reset();
  started_ = false;
}

void cell::terminate(const error& reason) {
  if (!alive()) {
    return;
  }
  destroy_instance(reason);
  // The factory holds the constructor arguments, which may hold handles to this very cell (e.g. a
  // peer list): drop them so no reference cycle outlives the actor.
  factory_ = actor_factory{};
  alive_.store(false, std::memory_order_release);
  message* rest = head_.exchange(closed(), std::memory_order_seq_cst);
  const error why = (cache_ == nullptr && (rest == nullptr || rest == closed())) ? error{} : dead_error(*engine_, id_);
  bounce_list(cache_, why);
  cache_ = nullptr;
  // Reverse so bounces happen in arrival order.
  message* rev = nullptr;
  while (rest != nullptr && rest != closed()) {
    message* n = rest->next_;
    rest->next_ = rev;
    rev = rest;
    rest = n;
  }
  bounce_list(rev, why);
  std::vector<std::weak_ptr<cell>> watchers;
  {
    const mutex_lock lock{watchers_mu_};
    terminated_ = true;
    exit_reason_ = reason;
    watchers.swap(watchers_);
  }
  for (auto& w : watchers) {
    if (auto c = w.lock()) {
      c->enqueue(make_message([src = id_, reason](cell& self) {
        if (auto* inst = self.instance()) {
          inst->on_down(down_msg{src, reason});
        }
      }));
    }
  }
  engine_->on_terminated(*this);
}

void cell::kill(const error& reason) {
  current_scope scope{this};
  terminate(reason);
}

void cell::add_watcher(const std::shared_ptr<cell>& watcher) {
  error reason;
  {
    const mutex_lock lock{watchers_mu_};
    if (!terminated_) {
      watchers_.push_back(watcher);
      return;
    }
    reason = exit_reason_;
  }
  watcher->enqueue(make_message([src = id_, reason](cell& self) {
    if (auto* inst = self.instance()) {
      inst->on_down(down_msg{src, reason});
    }
  }));
}

void cell::remove_watcher(const cell& watcher) {
  const mutex_lock lock{watchers_mu_};
  std::erase_if(watchers_, [&](const std::weak_ptr<cell>& w) {
    auto c = w.lock();
    return !c || c.get() == &watcher;
  });
}

}  // namespace prsgd::runtime::detail
