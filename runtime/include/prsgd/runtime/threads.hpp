// SPDX-License-Identifier: Apache-2.0
#pragma once

/// @file
/// Lists every thread the runtime creates and what runs on it (Ray's io_context policy, as a header).
///
/// | thread                      | count                     | runs                                                 |
/// |-----------------------------|---------------------------|------------------------------------------------------|
/// | `prsgd-actor-<i>`           | config::threads (0=cores) | `io_context::run()`: actor handlers (one actor at a  |
/// |                             |                           | time per cell: mailbox + scheduled flag, see cell),  |
/// |                             |                           | future continuations, posted jobs                    |
/// | `prsgd-compute-<i>`         | config::compute_threads   | `actor::run_compute` jobs (Eigen training, blocking  |
/// |                             |                           | I/O); results go back to the actor as messages       |
/// | `prsgd-timer`               | 1                         | the timer queue: fires actor timers, periodic        |
/// |                             |                           | re-arming, ask deadlines, restart backoff; it only   |
/// |                             |                           | enqueues messages/jobs, never runs actor code        |
/// | caller of `shutdown`        | -                         | graceful drain wait; after the pools are joined, the |
/// |                             |                           | hard-stop sweep runs remaining `on_stop` hooks       |
/// | non-actor threads (main,    | -                         | `spawn`, `tell`, `ask`, `future::get` (blocking; not |
/// | tests, transport I/O)       |                           | allowed on actor threads: checked; polls for up to   |
/// |                             |                           | config::wait_spin, yielding the CPU, then sleeps)    |
///
/// `deterministic_system` creates none of these: everything runs on the test thread when the test
/// calls `dispatch_one` / `dispatch_all` / `advance`.
///
/// Actor state needs no mutex: the scheduled flag of a cell guarantees that `cell::run` (and so every
/// handler, timer callback and continuation of that actor) is on at most one thread at a time, and
/// the flag's acquire/release handoff orders one handler's writes before the next handler's reads.

namespace prsgd::threads {

/// Returns the name prefix of actor threads.
inline constexpr const char* actor_thread_prefix = "prsgd-actor-";
/// Returns the name prefix of compute threads.
inline constexpr const char* compute_thread_prefix = "prsgd-compute-";
/// Returns the name of the timer thread.
inline constexpr const char* timer_thread_name = "prsgd-timer";

}  // namespace prsgd::threads
