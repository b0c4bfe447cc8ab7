// SPDX-License-Identifier: Apache-2.0
#include "prsgd/runtime/actor.hpp"

#include <algorithm>
#include <utility>

#include "prsgd/common/check.hpp"
#include "tls.hpp"

namespace prsgd {

actor::actor() : cell_(runtime::detail::tls::constructing) {
  PRSGD_CHECK(cell_ != nullptr) << "actors are constructed only by actor_system::spawn";
}

actor::~actor() = default;

actor_id actor::id() const noexcept { return cell_->id(); }

actor_system& actor::system() const noexcept { return cell_->engine().facade(); }

clock_source::time_point actor::now() const noexcept { return cell_->engine().time().now(); }

void actor::quit(error reason) { cell_->request_stop(std::move(reason)); }

timer_id actor::schedule_once(clock_source::duration delay, runtime::detail::unique_function<void()> fn) {
  return cell_->add_timer(delay, false, std::move(fn));
}

timer_id actor::schedule_periodic(clock_source::duration period, runtime::detail::unique_function<void()> fn) {
  return cell_->add_timer(period, true, std::move(fn));
}

bool actor::cancel_timer(timer_id id) { return cell_->cancel_timer(id); }

void actor::rearm_once(std::optional<timer_id>& slot, std::optional<clock_source::time_point> at,
                       runtime::detail::unique_function<void()> fn) {
  if (slot) {
    cancel_timer(*slot);
    slot.reset();
  }
  if (!at) {
    return;
  }
  const auto delay = std::max(clock_source::duration::zero(), *at - now());
  slot = schedule_once(delay, [&slot, fn = std::move(fn)]() mutable {
    slot.reset();
    fn();
  });
}

void actor::monitor(const actor_addr& other) {
  if (other.valid()) {
    other.cell()->add_watcher(cell_->shared_from_this());
  }
}

void actor::demonitor(const actor_addr& other) {
  if (other.valid()) {
    other.cell()->remove_watcher(*cell_);
  }
}

actor_addr actor::self_addr() const { return actor_addr{cell_->shared_from_this()}; }

}  // namespace prsgd
