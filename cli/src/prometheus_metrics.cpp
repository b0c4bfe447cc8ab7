// SPDX-License-Identifier: Apache-2.0
#include "prometheus_metrics.hpp"

#include <dlfcn.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <pthread.h>

#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

// Debian's civetweb (under the Exposer) starts its threads with pthread_attr_setstacksize(attr, 100 KiB),
// and glibc carves the process's static TLS out of that: libopenblas alone takes 60 KiB of it in prsgd.
// What is left is too little for civetweb's own 8 KiB printf buffers: its error page (`curl
// 127.0.0.1:PORT/` -> 404, a malformed request -> 400) overflowed the stack and killed the averager
// with SIGSEGV, and under ASan a 404 did. This definition, in the executable, comes before libc's in
// symbol lookup: it raises a requested stack below 1 MiB to 1 MiB and forwards to libc's. Threads that
// ask for no size (prsgd's own, std::thread) or for 1 MiB or more are unaffected; a bigger stack than
// asked for only costs address space.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, std::size_t size) noexcept {
  using setstacksize_fn = int (*)(pthread_attr_t*, std::size_t);
  static const auto next = reinterpret_cast<setstacksize_fn>(::dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr std::size_t min_size = std::size_t{1} << 20;
  return next(attr, size < min_size ? min_size : size);
}

namespace prsgd::cli {
namespace {

/// What the Exposer scrapes: the registry, read under the lock record() holds while it updates a round.
class locked_registry final : public prometheus::Collectable {
 public:
  explicit locked_registry(std::mutex& mu) : mu_(mu) {}
  [[nodiscard]] std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard lock(mu_);
    return registry_.Collect();
  }
  [[nodiscard]] prometheus::Registry& registry() noexcept { return registry_; }

 private:
  std::mutex& mu_;
  prometheus::Registry registry_;
};

/// A gauge whose sample appears only once it has a value (test_acc before the first evaluation has none,
/// rather than a misleading 0).
class optional_gauge {
 public:
  optional_gauge(prometheus::Registry& r, const std::string& name, const std::string& help)
      : family_(&prometheus::BuildGauge().Name(name).Help(help).Register(r)) {}
  void set(double v) {
    if (gauge_ == nullptr) {
      gauge_ = &family_->Add({});
    }
    gauge_->Set(v);
  }

 private:
  prometheus::Family<prometheus::Gauge>* family_;
  prometheus::Gauge* gauge_ = nullptr;
};

prometheus::Counter& counter(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Family<prometheus::Counter>& counters_by_reason(prometheus::Registry& r, const std::string& name,
                                                            const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

prometheus::Gauge& gauge(prometheus::Registry& r, const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

double num(std::uint64_t v) { return static_cast<double>(v); }

}  // namespace

struct prometheus_metrics::impl {
  explicit impl(int p) : port(p) {}

  int port;
  std::mutex mu;
  std::shared_ptr<locked_registry> collectable = std::make_shared<locked_registry>(mu);
  prometheus::Registry& r = collectable->registry();

  prometheus::Counter& rounds = counter(r, "prsgd_rounds_total", "Rounds closed by this averager incarnation.");
  prometheus::Gauge& round =
      gauge(r, "prsgd_round", "The last round r that closed (its submissions produced x_bar_{r+1}).");
  prometheus::Gauge& rounds_planned =
      gauge(r, "prsgd_rounds_planned", "Rounds the job is planned to run (0 = open-ended); JSON field rounds_total.");
  optional_gauge epoch{r, "prsgd_epoch", "Passes over the training set once x_bar_{r+1} exists; JSON field epoch."};
  prometheus::Gauge& members = gauge(r, "prsgd_members", "Members of the last closed round when it started (|M_r|).");
  prometheus::Counter& submissions =
      counter(r, "prsgd_submissions_total", "Submissions that entered the average, over all closed rounds.");
  prometheus::Counter& samples =
      counter(r, "prsgd_samples_total", "Training samples behind the averaged submissions, over all closed rounds.");
  optional_gauge train_loss{r, "prsgd_train_loss",
                            "Sample-weighted mean training loss of the last round that carried loss stats."};
  optional_gauge test_acc{r, "prsgd_test_acc", "Test accuracy of x_bar at the last evaluated round."};
  optional_gauge test_loss{r, "prsgd_test_loss",
                           "Mean test cross-entropy of x_bar at the last evaluated round that reported one."};
  prometheus::Gauge& consensus_distance =
      gauge(r, "prsgd_consensus_distance", "(1/N) sum_i ||x_i - x_bar||^2 over the last round's accepted submissions.");
  prometheus::Counter& bytes_in =
      counter(r, "prsgd_bytes_in_total", "Payload bytes of every MODEL received, accepted or not.");
  prometheus::Counter& bytes_out = counter(r, "prsgd_bytes_out_total", "Payload bytes of the RESTARTs sent.");
  prometheus::Counter& late = counter(
      r, "prsgd_late_total", "MODELs dropped because their round was closed or their averager incarnation gone.");
  prometheus::Counter& duplicate =
      counter(r, "prsgd_duplicate_total", "MODELs dropped because the same (worker, round, incarnation) was counted.");
  prometheus::Counter& rejected =
      counter(r, "prsgd_rejected_total", "MODELs dropped for any other reason (not a member, bad size, NaN, ...).");
  prometheus::Counter& screened = counter(
      r, "prsgd_screened_total", "Submissions the outlier screen left out (update norm > k x the round's median).");
  prometheus::Counter& refused_rounds =
      counter(r, "prsgd_refused_rounds_total", "Rounds refused because the combined x_bar had NaN/Inf (x_bar kept).");
  prometheus::Counter& removed =
      counter(r, "prsgd_removed_total", "Members removed before submitting (LEAVE, heartbeat timeout, restart).");
  prometheus::Counter& admitted = counter(r, "prsgd_admitted_total", "Joiners admitted at a round close.");
  prometheus::Counter& closed_by_deadline =
      counter(r, "prsgd_closed_by_deadline_total",
              "Rounds closed by the deadline + quorum policy before every member submitted.");
  prometheus::Gauge& round_seconds = gauge(
      r, "prsgd_round_seconds", "Seconds from the last closed round's start (RESTARTs sent) to its barrier close.");
  prometheus::Gauge& barrier_wait_seconds = gauge(
      r, "prsgd_barrier_wait_seconds", "Seconds from the last closed round's first accepted submission to its close.");
  prometheus::Gauge& wall_seconds =
      gauge(r, "prsgd_wall_seconds", "Seconds since this averager incarnation started, at the last barrier close.");
  prometheus::Gauge& step_size = gauge(r, "prsgd_step_size", "Step size gamma sent in the last round's RESTARTs.");
  prometheus::Gauge& interval_min =
      gauge(r, "prsgd_interval_min", "Smallest local step count tau_i among the last round's submissions.");
  prometheus::Gauge& interval_max =
      gauge(r, "prsgd_interval_max", "Largest local step count tau_i among the last round's submissions.");

  // Messages the transport dropped, by reason (cumulative; record_transport adds the growth).
  prometheus::Family<prometheus::Counter>& dropped_family =
      counters_by_reason(r, "prsgd_transport_dropped_total",
                         "Messages or connections the averager's transport refused or dropped, by reason.");
  prometheus::Counter& dropped_malformed = dropped_family.Add({{"reason", "malformed"}});
  prometheus::Counter& dropped_too_many_frames = dropped_family.Add({{"reason", "too_many_frames"}});
  prometheus::Counter& dropped_connection = dropped_family.Add({{"reason", "dropped_connection"}});
  prometheus::Counter& dropped_zap = dropped_family.Add({{"reason", "zap_denied"}});
  prometheus::Counter& dropped_key_conflict = dropped_family.Add({{"reason", "key_conflict"}});
  prometheus::Counter& dropped_unreachable = dropped_family.Add({{"reason", "peer_unreachable"}});
  prometheus::Family<prometheus::Counter>& averager_dropped_family = counters_by_reason(
      r, "prsgd_dropped_total", "Messages the averager dropped before its protocol core, by reason.");
  prometheus::Counter& averager_malformed = averager_dropped_family.Add({{"reason", "malformed"}});
  prometheus::Counter& averager_send_failed = averager_dropped_family.Add({{"reason", "send_failed"}});
  prometheus::Counter& averager_inbox_full = averager_dropped_family.Add({{"reason", "inbox_full"}});
  prometheus::Counter& sends_refused =
      counter(r, "prsgd_transport_sends_refused_total",
              "Sends refused for back-pressure (a peer's queue full); the message was not sent.");
  transport_stats last_transport;

  std::unique_ptr<prometheus::Exposer> exposer;
};

prometheus_metrics::prometheus_metrics(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

prometheus_metrics::~prometheus_metrics() {
  // The Exposer (its HTTP threads) goes first: no scrape can then reach the registry being destroyed.
  if (impl_) {
    impl_->exposer.reset();
  }
}

expected<std::unique_ptr<prometheus_metrics>> prometheus_metrics::bind(int port, const std::string& host,
                                                                       const std::string& option) {
  if (port < 0 || port > 65535) {
    return fail(errc::invalid_argument, option + " port must be 0..65535 (got " + std::to_string(port) + ")");
  }
  auto p = std::make_unique<impl>(port);
  const std::string address = host + ":" + std::to_string(port);
  try {
    p->exposer =
        std::make_unique<prometheus::Exposer>(std::vector<std::string>{"listening_ports", address, "num_threads", "2"});
    p->exposer->RegisterCollectable(p->collectable);
    // Port 0 asks for any free port: the one the server got.
    if (const auto ports = p->exposer->GetListeningPorts(); !ports.empty()) {
      p->port = ports.front();
    }
  } catch (const std::exception& e) {
    return fail(errc::io_error, "cannot serve metrics on " + address + " (" + option +
                                    "): port in use, address not on this host, or not allowed (" + e.what() + ")");
  }
  return std::unique_ptr<prometheus_metrics>{new prometheus_metrics(std::move(p))};
}

void prometheus_metrics::record(const actors::round_metrics& m) {
  std::lock_guard lock(impl_->mu);
  auto& s = *impl_;
  s.rounds.Increment();
  s.round.Set(num(m.round));
  s.rounds_planned.Set(num(m.rounds_total));
  if (m.epoch) {
    s.epoch.set(*m.epoch);
  }
  s.members.Set(static_cast<double>(m.members));
  s.submissions.Increment(static_cast<double>(m.submissions));
  s.samples.Increment(num(m.samples));
  if (m.train_loss) {
    s.train_loss.set(*m.train_loss);
  }
  if (m.test_acc) {
    s.test_acc.set(*m.test_acc);
  }
  if (m.test_loss) {
    s.test_loss.set(*m.test_loss);
  }
  s.consensus_distance.Set(m.consensus_distance);
  s.bytes_in.Increment(num(m.bytes_in));
  s.bytes_out.Increment(num(m.bytes_out));
  s.late.Increment(num(m.late));
  s.duplicate.Increment(num(m.duplicate));
  s.rejected.Increment(num(m.rejected));
  s.screened.Increment(static_cast<double>(m.screened.size()));
  if (m.refused) {
    s.refused_rounds.Increment();
  }
  s.removed.Increment(static_cast<double>(m.removed));
  s.admitted.Increment(static_cast<double>(m.admitted));
  if (m.closed_by_deadline) {
    s.closed_by_deadline.Increment();
  }
  s.round_seconds.Set(m.round_s);
  s.barrier_wait_seconds.Set(m.barrier_wait_s);
  s.wall_seconds.Set(m.wall_s);
  s.step_size.Set(m.step_size);
  s.interval_min.Set(num(m.interval_min));
  s.interval_max.Set(num(m.interval_max));
}

void prometheus_metrics::record_drop(std::string_view reason, std::uint64_t count) {
  std::lock_guard lock(impl_->mu);
  if (reason == "malformed") {
    impl_->averager_malformed.Increment(num(count));
  } else if (reason == "send_failed") {
    impl_->averager_send_failed.Increment(num(count));
  } else if (reason == "inbox_full") {
    impl_->averager_inbox_full.Increment(num(count));
  } else {
    // Any other reason the averager reports (e.g. the core's bad_token, wrong_connection, wrong_key).
    impl_->averager_dropped_family.Add({{"reason", std::string{reason}}}).Increment(num(count));
  }
}

void prometheus_metrics::record_transport(const transport_stats& now) {
  std::lock_guard lock(impl_->mu);
  auto& s = *impl_;
  const auto grow = [](prometheus::Counter& c, std::uint64_t before, std::uint64_t after) {
    if (after > before) {
      c.Increment(num(after - before));
    }
  };
  grow(s.dropped_malformed, s.last_transport.malformed_received, now.malformed_received);
  grow(s.dropped_too_many_frames, s.last_transport.too_many_frames, now.too_many_frames);
  grow(s.dropped_connection, s.last_transport.from_dropped_connections, now.from_dropped_connections);
  grow(s.dropped_zap, s.last_transport.zap_denied, now.zap_denied);
  grow(s.dropped_key_conflict, s.last_transport.key_conflicts, now.key_conflicts);
  grow(s.dropped_unreachable, s.last_transport.messages_dropped, now.messages_dropped);
  grow(s.sends_refused, s.last_transport.sends_refused, now.sends_refused);
  s.last_transport = now;
}

int prometheus_metrics::port() const noexcept { return impl_->port; }

}  // namespace prsgd::cli
