// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "prsgd/actors/protocol.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"
#include "prsgd/common/clock.hpp"

namespace prsgd::actors {

/// Configures a shard owner: slice `shard` of `shards` of every model of one sharded job.
struct shard_owner_config {
  std::uint64_t shard = 0;
  std::uint64_t shards = 1;
  /// The endpoint workers reach this owner at (announced to the coordinator, which puts it in WELCOME).
  std::string endpoint;
  /// This owner process's random nonce (a restarted owner is a new one).
  incarnation_t incarnation = 0;
  /// How often SHARD_HELLO goes to the coordinator (until SHARD_SETUP names another interval).
  std::chrono::nanoseconds heartbeat_interval{std::chrono::seconds(1)};
  /// A member may have at most this many slices (different tokens) waiting per round; more are dropped.
  std::size_t slices_per_member = 4;
  /// Ring gather: the values per SHARD_RELAY (a multiple of 256, int8's block). 16384 values of f32 are
  /// 64 KiB, 5 ms at 100 Mbit/s: the delay each owner adds before it passes a slice on.
  std::uint64_t relay_chunk = 16384;
};

/// Holds one message a shard owner wants sent: to the coordinator, to the worker connection `peer`, or
/// (`to_next`) to the next owner of the ring.
struct owner_send {
  bool to_coordinator = true;
  origin_t peer = 0;
  shard_msg msg;
  bool to_next = false;
};

/// Lists what an owner shell must do after feeding one event to shard_owner_core, in this order.
struct owner_actions {
  std::vector<owner_send> sends;
  /// Set once the owner must end: STOP from the coordinator (empty `failed`), or a broken invariant of
  /// the job that makes its slice useless (`failed` says which; the process exits 1).
  bool stopped = false;
  std::optional<std::string> failed;
  /// Arm the timer that calls tick() at this time.
  std::optional<clock_source::time_point> wakeup;
  /// Ring gather: connect to the next owner of the ring at this endpoint (before the sends), replacing
  /// any earlier connection to a next owner.
  std::optional<std::string> connect_next;
};

/// Holds slice k of x̄ for a sharded job and averages it: the workers send it slice k of their models
/// (SHARD_SLICE; each is acknowledged to the coordinator with its update norm, SHARD_ACK); when the
/// coordinator closes a barrier it names the members to combine and their samples and steps
/// (SHARD_ROUND), and the owner combines exactly those slices with the job's rule, sends slice k of the
/// new x̄ to the round's members (SHARD_AVERAGE) and reports its checksum (SHARD_REPORT, with the slice
/// when the coordinator needs x̄). It never sees whole models, and it averages only what the coordinator
/// names, so a member's submission counts at most once.
///
/// Ring gather (SHARD_SETUP's `ring`): every slice of x̄ a combine makes also goes to the next owner of
/// the ring (SHARD_RELAY), which keeps it for the round and passes it on until it
/// reaches the owner before its origin. A member that names this owner its home gets every slice of x̄
/// from it, its own and the relayed ones; the other owners send such a member nothing, except a lossy
/// dtype's whole slice to a member that did not train from the x̄ the relayed change is based on. So every
/// link between hosts carries each slice once, in one connection, instead of K − 1 connections at once.
/// The slices SETUP hands out (x̄ as of the start) are not relayed: every owner sends its own, as without
/// the ring, so an owner that registers again before the job starts leaves no gap in the ring.
///
/// Sans-IO: the shell feeds it decoded messages with the worker connection they came in on, and tick()
/// when the wakeup is due. Not thread-safe; used only on the owning actor's strand.
///
/// ```
///   start() ──► registering ──(1) SHARD_SETUP──► holding x̄_r ──(2) SHARD_ROUND(r+1, combine)──┐
///                  ▲   │ SHARD_HELLO every            │  ▲  slices of round r are acked     │
///                  │   │ heartbeat interval           │  └────────── x̄_{r+1}, recipients ◄───┘
///                  │   └──────────────────────────────┼──── (3) SHARD_SETUP of a newer coordinator
///                  │                                  │        incarnation: start over from its x̄
///                  └──────────────────────────────────┴──── (4) STOP ──► stopped
/// ```
class shard_owner_core {
 public:
  shard_owner_core(shard_owner_config config, const clock_source& clk);

  /// Starts registering: SHARD_HELLO to the coordinator, then every heartbeat interval.
  [[nodiscard]] owner_actions start();
  /// Handles SHARD_SETUP, SHARD_ROUND or STOP from the coordinator; anything else is ignored.
  [[nodiscard]] owner_actions on_coordinator(const shard_msg& msg);
  /// Handles SHARD_SLICE from the worker connection `from`: a slice of a member's model, or without a
  /// model the connection the member listens on.
  [[nodiscard]] owner_actions on_slice(const shard_slice_msg& msg, origin_t from);
  /// Handles SHARD_RELAY from the previous owner of the ring (the shell checks where it came from).
  [[nodiscard]] owner_actions on_relay(const shard_relay_msg& msg);
  /// Handles time: the next SHARD_HELLO.
  [[nodiscard]] owner_actions tick();

  /// Returns true once a SHARD_SETUP arrived.
  [[nodiscard]] bool ready() const noexcept { return ready_; }
  /// Returns the round of the slice of x̄ the owner holds.
  [[nodiscard]] round_t round() const noexcept { return round_; }
  /// Returns the slice of x̄_round() (empty before SHARD_SETUP).
  [[nodiscard]] const flat_buffer& slice() const noexcept { return slice_; }
  /// Returns the slices of the open round received so far (accepted ones only).
  [[nodiscard]] std::size_t pending_slices() const noexcept { return slices_.size(); }
  /// Returns the slices of x̄_round() relayed to this owner whole so far (ring gather).
  [[nodiscard]] std::size_t relayed_slices() const noexcept;

 private:
  struct held_slice {
    flat_buffer model;
    origin_t from = 0;
  };
  /// Where a member listens: the token it named, its connection, the owner it named its home, and the
  /// checksum of the slice it holds until its first slice of x̄ is served.
  struct route {
    session_token token = 0;
    origin_t conn = 0;
    std::optional<std::uint64_t> home;
    std::optional<std::uint64_t> holds;
  };
  /// A slice of x̄ coming around the ring, chunk by chunk: whole, or a change based on x̄_base in `dtype`.
  struct relayed {
    std::shared_ptr<std::vector<float>> values;
    std::vector<bool> chunks;  // which chunks arrived
    std::size_t missing = 0;
    algorithms::wire_dtype dtype = algorithms::wire_dtype::f32;
    std::optional<round_t> base;
  };
  using relayed_round = std::vector<std::optional<relayed>>;
  void hello(owner_actions& out);
  void combine(const shard_round_msg& order);
  [[nodiscard]] std::vector<float> settle_change(std::vector<float> next);
  void serve(owner_actions& out, const shard_recipient& to);
  /// True when slice() goes as a change against x̄_{round()−1} (a lossy dtype, after a combine).
  [[nodiscard]] bool sends_change() const noexcept { return change_ && round_ > 0; }
  void serve_all(owner_actions& out);
  void relay_own(owner_actions& out);
  void report(owner_actions& out, bool fetch, bool ok, std::string why);
  [[nodiscard]] owner_actions finish(owner_actions out);

  shard_owner_config config_;
  const clock_source* clock_;
  bool ready_ = false;
  bool stopped_ = false;
  incarnation_t coordinator_ = 0;
  round_t round_ = 0;
  std::uint64_t offset_ = 0;
  std::uint64_t length_ = 0;
  flat_buffer slice_;
  /// slice_checksum() of slice_, once per slice (for SHARD_REPORT and the confirmations of SHARD_AVERAGE).
  checksum_cache checksums_;
  std::chrono::nanoseconds hello_every_;
  clock_source::time_point next_hello_{};
  /// Slices of the open round, by (member, token).
  std::map<std::pair<member_id, session_token>, held_slice> slices_;
  /// The connection each member listens on, with the token and home it named.
  std::map<member_id, route> routes_;
  /// The members that get x̄_round(), and the (member, token, shard) slices already sent.
  std::set<std::pair<member_id, session_token>> recipients_;
  std::set<std::tuple<member_id, session_token, std::uint64_t>> served_;
  /// Ring gather: on, the next owner's endpoint, the model's size, the relayed slices of x̄_round() by
  /// shard, and those of later rounds that came before this owner's own combine.
  bool ring_ = false;
  std::string ring_next_;
  std::uint64_t model_size_ = 0;
  relayed_round parts_;
  std::map<round_t, relayed_round> early_;
  /// True when slice() went around the ring (it came from a combine, not from SETUP).
  bool relayed_own_ = false;
  /// A combine that found an input missing or failed: reported with every later SHARD_REPORT.
  std::optional<std::string> broken_;
  /// The job's wire dtype (from SHARD_SETUP). Lossy: members send slices of their changes, and the owner
  /// sends x̄_round() − x̄_{round()−1} (with its own error feedback) to the members that hold x̄_{round()−1}.
  algorithms::wire_dtype wire_ = algorithms::wire_dtype::f32;
  /// SHARD_SETUP's `compress`: relays, and slices for members on other hosts, travel compressed.
  bool compress_ = false;
  algorithms::error_feedback downlink_;
  /// The encoded change of the last combine (null: send the whole slice), and who trained from the
  /// slice before it (the combine's inputs), who can rebuild x̄_round() from it.
  flat_buffer change_;
  std::set<std::pair<member_id, session_token>> holders_;
};

}  // namespace prsgd::actors
