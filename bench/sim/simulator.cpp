// SPDX-License-Identifier: Apache-2.0
#include "simulator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <queue>
#include <random>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "prsgd/actors/worker_core.hpp"
#include "prsgd/common/clock.hpp"

namespace prsgd::sim {
namespace {

using actors::actions;
using clock_point = clock_source::time_point;

// ---- the network ----------------------------------------------------------------------------------------
// Every host has an up link and a down link. A batch of messages a host sends at once (an averager's
// RESTARTs of one round, each behind its announcing heartbeat) shares its up link fairly: messages of equal
// size leave together when the batch's bytes are through, a smaller one as soon as every message has sent
// as many bytes as it has; otherwise transfers on a link queue in order. A message reaches its receiver once its bytes
// are through the receiver's down link too (the two links pipeline, as TCP does across a switch) and the
// latency has passed.
struct host {
  double up_rate = 0, down_rate = 0;
  double up_free = 0, down_free = 0;
  double bytes_up = 0, bytes_down = 0;
};

enum class ev : std::uint8_t { to_averager, to_worker, averager_tick, worker_tick, trained, churn };

struct event {
  double t = 0;
  std::uint64_t seq = 0;
  ev kind = ev::churn;
  std::size_t worker = 0;  // worker index (to_worker, worker_tick, trained; to_averager: the sender)
  std::uint64_t gen = 0;   // wakeup / task generation it belongs to
  std::int64_t at_ns = 0;  // a wakeup's exact time on the core's clock (0: none), so the core sees it due
  std::variant<std::monostate, actors::to_averager, actors::to_worker> msg;
};

// The cores send any_msg; a receiver takes its own narrower variant (a core never sends the other kind).
template <class To>
To narrow(actors::any_msg m) {
  return std::visit(
      [](auto&& x) -> To {
        if constexpr (std::is_constructible_v<To, std::decay_t<decltype(x)>>) {
          return To{std::forward<decltype(x)>(x)};
        } else {
          return To{};
        }
      },
      std::move(m));
}

struct later {
  bool operator()(const event& a, const event& b) const { return a.t != b.t ? a.t > b.t : a.seq > b.seq; }
};

struct worker {
  std::unique_ptr<actors::worker_core> core;
  std::size_t host = 0;
  double step_s = 0;
  bool alive = true;
  std::uint64_t tick_gen = 0;
  std::uint64_t task_gen = 0;
  std::optional<actors::train_task> task;
  double task_start = 0;
  double busy_s = 0;
  double born = 0, died = -1;
};

class engine {
 public:
  explicit engine(const sim_config& c) : c_(c), rng_(c.seed) {}

  expected<sim_result> run();

 private:
  double now_ = 0;
  const sim_config& c_;
  std::mt19937_64 rng_;
  fake_clock clock_;
  std::int64_t base_ns_ = clock_.now().time_since_epoch().count();  // the clock at simulated time 0
  std::optional<actors::averager_core> avg_;
  std::uint64_t avg_tick_gen_ = 0;
  std::vector<host> hosts_;
  std::vector<worker> workers_;
  std::map<actors::member_id, actors::origin_t> routes_;
  std::priority_queue<event, std::vector<event>, later> queue_;
  std::uint64_t seq_ = 0;
  std::size_t alive_ = 0;
  sim_result res_;
  std::vector<double> round_s_;
  double barrier_sum_ = 0, members_sum_ = 0;
  bool done_ = false;
  double last_close_ = 0;

  void push(event e) {
    e.seq = seq_++;
    queue_.push(std::move(e));
  }
  // Moves the core's clock to simulated time t, and at least to at_ns (a wakeup's own time).
  void set_clock(double t, std::int64_t at_ns) {
    const std::int64_t target = std::max(base_ns_ + static_cast<std::int64_t>(std::llround(t * 1e9)), at_ns);
    const std::int64_t cur = clock_.now().time_since_epoch().count();
    if (target > cur) {
      clock_.advance(std::chrono::nanoseconds(target - cur));
    }
  }
  double to_s(clock_point p) const { return static_cast<double>(p.time_since_epoch().count() - base_ns_) / 1e9; }
  void push_wakeup(ev kind, std::size_t w, std::uint64_t gen, clock_point p) {
    push(event{std::max(now_, to_s(p)), 0, kind, w, gen, p.time_since_epoch().count(), {}});
  }
  double payload_bytes(const actors::any_msg& m) const {
    const bool model = std::holds_alternative<actors::model_msg>(m) || std::holds_alternative<actors::restart_msg>(m);
    return c_.header_bytes + (model ? c_.model_floats * 4.0 : 0.0);
  }
  std::size_t add_host(double up, double down) {
    hosts_.push_back(host{up, down});
    return hosts_.size() - 1;
  }
  // Carries one message of `bytes` that left `from`'s up link over [start, up_done] to `to`; returns when it
  // is delivered.
  double deliver_time(std::size_t to, double bytes, double start, double up_done) {
    host& h = hosts_[to];
    const double down_start = std::max(start + c_.latency_s, h.down_free);
    const double done = std::max(down_start + bytes / h.down_rate, up_done + c_.latency_s);
    h.down_free = done;
    h.bytes_down += bytes;
    return done;
  }

  void spawn_worker(double t);
  void averager_actions(actions a);
  void worker_actions(std::size_t w, actions a);
  void schedule_churn();
  void on_trained(std::size_t w, std::uint64_t gen);
  void crash(std::size_t w);
};

void engine::spawn_worker(double t) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const double spread = std::log(std::max(1.0, c_.speed_spread));
  worker w;
  w.step_s = c_.step_s * std::exp(spread * u(rng_));
  w.host = add_host(c_.worker_rate, c_.worker_rate);
  w.born = t;
  actors::worker_config wc;
  wc.incarnation = (rng_() | 1U);
  wc.speed_hint = 1.0 / w.step_s;
  wc.heartbeat_interval = std::chrono::nanoseconds(static_cast<std::int64_t>(c_.heartbeat_s * 1e9));
  wc.join_retry = wc.heartbeat_interval;
  wc.averager_timeout = std::chrono::nanoseconds(static_cast<std::int64_t>(c_.heartbeat_timeout_s * 1e9));
  w.core = std::make_unique<actors::worker_core>(wc, clock_);
  workers_.push_back(std::move(w));
  ++alive_;
  const std::size_t idx = workers_.size() - 1;
  worker_actions(idx, workers_[idx].core->start());
}

void engine::averager_actions(actions a) {
  for (const auto& r : a.routes) {
    routes_[r.member] = r.via;
  }
  // The batch's bytes share the averager's up link.
  host& ah = hosts_[0];
  double total = 0;
  for (const auto& s : a.sends) {
    total += payload_bytes(s.msg);
  }
  const double start = std::max(now_, ah.up_free);
  const double up_done = start + total / ah.up_rate;
  if (!a.sends.empty()) {
    ah.up_free = up_done;
    ah.bytes_up += total;
  }
  // Fair sharing: a message of b bytes is through once every message of the batch has sent min(b, its own
  // size), so a small message (the heartbeat announcing a RESTART) leaves early and does not hold the
  // destination's down link until the whole batch is out.
  // With the sizes sorted and their prefix sums, that is the bytes of the smaller messages plus b for each
  // of the others: O(log n) per message, as a batch holds two messages per member.
  std::vector<double> sizes;
  sizes.reserve(a.sends.size());
  for (const auto& s : a.sends) {
    sizes.push_back(payload_bytes(s.msg));
  }
  std::sort(sizes.begin(), sizes.end());
  std::vector<double> below(sizes.size() + 1, 0.0);  // below[i]: the bytes of the i smallest
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    below[i + 1] = below[i] + sizes[i];
  }
  const auto leaves_at = [&](double b) {
    const auto i = static_cast<std::size_t>(std::lower_bound(sizes.begin(), sizes.end(), b) - sizes.begin());
    const double shared = below[i] + b * static_cast<double>(sizes.size() - i);
    return start + shared / ah.up_rate;
  };
  for (auto& s : a.sends) {
    actors::origin_t origin = 0;
    if (s.via) {
      origin = *s.via;
    } else if (auto it = routes_.find(s.member); it != routes_.end()) {
      origin = it->second;
    } else {
      continue;  // no route yet: the shell would drop it too
    }
    const std::size_t w = origin - 1;
    if (w >= workers_.size()) {
      continue;
    }
    const double bytes = payload_bytes(s.msg);
    const double at = deliver_time(workers_[w].host, bytes, start, leaves_at(bytes));
    push(event{at, 0, ev::to_worker, w, 0, 0, narrow<actors::to_worker>(std::move(s.msg))});
  }
  for (const auto& line : a.lines) {
    if (line.submissions > 0) {
      round_s_.push_back(line.round_s);
      barrier_sum_ += line.barrier_wait_s;
      members_sum_ += static_cast<double>(line.members);
      res_.closed_by_deadline += line.closed_by_deadline ? 1 : 0;
      last_close_ = now_;
    }
    res_.removed += line.removed;
  }
  if (a.stopped || a.done) {
    done_ = true;
  }
  if (a.wakeup) {
    push_wakeup(ev::averager_tick, 0, ++avg_tick_gen_, *a.wakeup);
  }
}

void engine::worker_actions(std::size_t w, actions a) {
  worker& wk = workers_[w];
  host& h = hosts_[wk.host];
  for (auto& s : a.sends) {
    const double bytes = payload_bytes(s.msg);
    const double start = std::max(now_, h.up_free);
    const double up_done = start + bytes / h.up_rate;
    h.up_free = up_done;
    h.bytes_up += bytes;
    const double at = deliver_time(0, bytes, start, up_done);
    push(event{at, 0, ev::to_averager, w, 0, 0, narrow<actors::to_averager>(std::move(s.msg))});
  }
  if (a.cancel_task && wk.task) {
    wk.busy_s += now_ - wk.task_start;
    wk.task.reset();
    ++wk.task_gen;
  }
  if (a.task) {
    if (wk.task) {
      wk.busy_s += now_ - wk.task_start;
    }
    double d = static_cast<double>(a.task->interval) * wk.step_s;
    if (c_.straggler_prob > 0 && std::bernoulli_distribution(c_.straggler_prob)(rng_)) {
      d *= c_.straggler_factor;
    }
    wk.task = std::move(a.task);
    wk.task_start = now_;
    push(event{now_ + d, 0, ev::trained, w, ++wk.task_gen, 0, {}});
  }
  if (a.stopped) {
    if (wk.task) {
      wk.busy_s += now_ - wk.task_start;
      wk.task.reset();
    }
    if (wk.alive) {
      wk.alive = false;
      wk.died = now_;
      --alive_;
    }
    return;
  }
  if (a.wakeup) {
    push_wakeup(ev::worker_tick, w, ++wk.tick_gen, *a.wakeup);
  }
}

void engine::on_trained(std::size_t w, std::uint64_t gen) {
  worker& wk = workers_[w];
  if (!wk.alive || gen != wk.task_gen || !wk.task) {
    return;
  }
  wk.busy_s += now_ - wk.task_start;
  actors::train_task task = std::move(*wk.task);
  wk.task.reset();
  // The stand-in model moves a little, so the average is a real computation over finite values.
  auto params = std::make_shared<std::vector<float>>(*task.model);
  std::normal_distribution<float> noise(0.0F, 0.01F);
  for (auto& v : *params) {
    v += noise(rng_);
  }
  actors::train_result r;
  r.round = task.round;
  r.steps = task.interval;
  r.samples = task.interval * std::max<std::uint64_t>(1, task.batch_size);
  r.loss_sum = static_cast<double>(r.samples);
  r.loss_count = r.samples;
  r.params = std::move(params);
  worker_actions(w, wk.core->on_trained(r));
}

void engine::crash(std::size_t w) {
  worker& wk = workers_[w];
  if (wk.task) {
    wk.busy_s += now_ - wk.task_start;
    wk.task.reset();
  }
  wk.alive = false;
  wk.died = now_;
  --alive_;
}

void engine::schedule_churn() {
  const double per_s =
      (c_.crash_per_hour + c_.leave_per_hour) * static_cast<double>(alive_) / 3600.0 + c_.join_per_hour / 3600.0;
  if (per_s <= 0) {
    return;
  }
  push(event{now_ + std::exponential_distribution<double>(per_s)(rng_), 0, ev::churn, 0, 0, 0, {}});
}

expected<sim_result> engine::run() {
  const auto wall0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();
  actors::averager_config ac;
  ac.interval = c_.interval;
  ac.intervals = c_.intervals;
  ac.deadline = c_.deadline;
  ac.fixed_deadline = std::chrono::nanoseconds(static_cast<std::int64_t>(c_.deadline_s * 1e9));
  ac.mad_k = c_.deadline_mad_k;
  ac.quorum = std::max<std::size_t>(1, c_.quorum);
  ac.heartbeat_interval = std::chrono::nanoseconds(static_cast<std::int64_t>(c_.heartbeat_s * 1e9));
  ac.heartbeat_timeout = std::chrono::nanoseconds(static_cast<std::int64_t>(c_.heartbeat_timeout_s * 1e9));
  ac.min_workers = std::max<std::size_t>(1, c_.workers);
  ac.shards = c_.max_workers > 0 ? c_.max_workers : c_.workers;
  ac.max_rounds = c_.rounds;
  ac.consensus_every = 0;
  ac.screen_k = 0;
  ac.checkpoint_every = 0;
  ac.total_steps = c_.rounds * c_.interval;
  ac.spec.batch_size = 64;
  ac.accounting_rounds_kept = 4;
  auto made =
      actors::averager_core::make(ac, clock_, std::vector<float>(std::max<std::size_t>(1, c_.core_floats), 0.0F));
  if (!made) {
    return unexpected(made.error());
  }
  avg_.emplace(std::move(made).value());
  add_host(c_.averager_rate, c_.averager_rate);
  for (std::size_t i = 0; i < c_.workers; ++i) {
    spawn_worker(0);
  }
  if (auto w = avg_->next_wakeup()) {
    push_wakeup(ev::averager_tick, 0, ++avg_tick_gen_, *w);
  }
  schedule_churn();
  while (!queue_.empty() && !done_) {
    event e = queue_.top();
    queue_.pop();
    if (e.t > c_.max_sim_s) {
      break;
    }
    now_ = e.t;
    set_clock(now_, e.at_ns);
    ++res_.events;
    switch (e.kind) {
      case ev::to_averager:
        // A message a crashed worker had sent before it died still arrives; it sends nothing later.
        averager_actions(avg_->on_message(std::get<actors::to_averager>(e.msg), e.worker + 1));
        break;
      case ev::to_worker:
        if (workers_[e.worker].alive) {
          worker_actions(e.worker, workers_[e.worker].core->on_message(std::get<actors::to_worker>(e.msg)));
        }
        break;
      case ev::averager_tick:
        if (e.gen == avg_tick_gen_) {
          averager_actions(avg_->tick());
        }
        break;
      case ev::worker_tick:
        if (workers_[e.worker].alive && e.gen == workers_[e.worker].tick_gen) {
          worker_actions(e.worker, workers_[e.worker].core->tick());
        }
        break;
      case ev::trained: on_trained(e.worker, e.gen); break;
      case ev::churn: {
        const double crash_w = c_.crash_per_hour * static_cast<double>(alive_);
        const double leave_w = c_.leave_per_hour * static_cast<double>(alive_);
        const double total = crash_w + leave_w + c_.join_per_hour;
        const double pick = std::uniform_real_distribution<double>(0, total)(rng_);
        if (pick < crash_w + leave_w && alive_ > 0) {
          std::vector<std::size_t> live;
          for (std::size_t i = 0; i < workers_.size(); ++i) {
            if (workers_[i].alive) {
              live.push_back(i);
            }
          }
          const std::size_t w = live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng_)];
          if (pick < crash_w) {
            ++res_.crashes;
            crash(w);
          } else {
            ++res_.leaves;
            worker_actions(w, workers_[w].core->leave());
            if (workers_[w].alive) {
              crash(w);  // left: the process is gone after its LEAVE
            }
          }
        } else {
          ++res_.joins;
          spawn_worker(now_);
        }
        schedule_churn();
        break;
      }
    }
  }
  res_.rounds = round_s_.size();
  res_.sim_s = last_close_;
  res_.rounds_per_hour = last_close_ > 0 ? static_cast<double>(res_.rounds) * 3600.0 / last_close_ : 0;
  if (!round_s_.empty()) {
    const double n = static_cast<double>(round_s_.size());
    res_.round_s_mean = std::accumulate(round_s_.begin(), round_s_.end(), 0.0) / n;
    std::vector<double> sorted = round_s_;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    res_.round_s_median = sorted[sorted.size() / 2];
    res_.barrier_wait_s_mean = barrier_sum_ / n;
    res_.members_mean = members_sum_ / n;
  }
  double busy = 0, life = 0, wmax = 0, wsum = 0;
  for (const auto& w : workers_) {
    double b = w.busy_s;
    if (w.alive && w.task) {
      b += now_ - w.task_start;
    }
    busy += b;
    life += (w.alive ? now_ : w.died) - w.born;
    const double bytes = hosts_[w.host].bytes_up + hosts_[w.host].bytes_down;
    wmax = std::max(wmax, bytes);
    wsum += bytes;
  }
  const double rounds = std::max<double>(1.0, static_cast<double>(res_.rounds));
  res_.utilisation = life > 0 ? busy / life : 0;
  res_.averager_bytes_per_round = (hosts_[0].bytes_up + hosts_[0].bytes_down) / rounds;
  res_.worker_bytes_per_round_max = wmax / rounds;
  res_.worker_bytes_per_round_mean = workers_.empty() ? 0 : wsum / static_cast<double>(workers_.size()) / rounds;
  res_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  res_.cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  return res_;
}

}  // namespace

expected<sim_result> simulate(const sim_config& config) {
  if (config.workers == 0 || config.rounds == 0 || config.interval == 0) {
    return fail(errc::invalid_argument, "workers, rounds and interval must be positive");
  }
  if (!(config.averager_rate > 0) || !(config.worker_rate > 0) || !(config.step_s > 0) || config.latency_s < 0) {
    return fail(errc::invalid_argument, "link rates and the step time must be positive, the latency >= 0");
  }
  if (config.speed_spread < 1 || config.straggler_prob < 0 || config.straggler_prob > 1 ||
      config.straggler_factor < 1) {
    return fail(errc::invalid_argument, "speed spread and straggler factor must be >= 1, the probability in [0, 1]");
  }
  if (config.crash_per_hour < 0 || config.leave_per_hour < 0 || config.join_per_hour < 0) {
    return fail(errc::invalid_argument, "churn rates must be >= 0");
  }
  engine e(config);
  return e.run();
}

std::string to_json(const sim_result& r) {
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "{\"rounds\":%llu,\"sim_s\":%.4f,\"rounds_per_hour\":%.2f,\"round_s_mean\":%.5f,\"round_s_median\":%.5f,"
      "\"barrier_wait_s_mean\":%.5f,\"utilisation\":%.4f,\"members_mean\":%.2f,"
      "\"averager_bytes_per_round\":%.0f,\"worker_bytes_per_round_max\":%.0f,"
      "\"worker_bytes_per_round_mean\":%.0f,\"closed_by_deadline\":%llu,\"crashes\":%llu,\"leaves\":%llu,"
      "\"joins\":%llu,\"removed\":%llu,\"events\":%llu,\"wall_s\":%.3f,\"cpu_s\":%.3f}",
      static_cast<unsigned long long>(r.rounds), r.sim_s, r.rounds_per_hour, r.round_s_mean, r.round_s_median,
      r.barrier_wait_s_mean, r.utilisation, r.members_mean, r.averager_bytes_per_round, r.worker_bytes_per_round_max,
      r.worker_bytes_per_round_mean, static_cast<unsigned long long>(r.closed_by_deadline),
      static_cast<unsigned long long>(r.crashes), static_cast<unsigned long long>(r.leaves),
      static_cast<unsigned long long>(r.joins), static_cast<unsigned long long>(r.removed),
      static_cast<unsigned long long>(r.events), r.wall_s, r.cpu_s);
  return buf;
}

}  // namespace prsgd::sim
