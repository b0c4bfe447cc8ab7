// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/actors/worker_core.hpp"
#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/sgd.hpp"
#include "prsgd/algorithms/sharding.hpp"
#include "prsgd/common/rate_limiter.hpp"
#include "prsgd/runtime/actor.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::actors {

/// Configures a worker_actor.
struct worker_actor_config {
  /// Protocol identity and timing.
  worker_config core;
  /// The model (built from the registry; its parameters are replaced by x̄ at every restart).
  std::string model_name;
  algorithms::model_config model;
  /// Local optimiser; the learning rate is replaced by RESTART's γ.
  algorithms::sgd_options sgd;
  /// Keep the local momentum buffer across restarts (false: reset at every restart).
  bool keep_momentum = true;
  /// Training data (the whole set; the sampler picks the shard the averager assigns in WELCOME).
  std::shared_ptr<const algorithms::dataset> train_set;
  /// The partition scheme (the shard index and count come from the averager; so do the batch size and seed
  /// when the averager announces them, else `batch_size` and `shard.seed`).
  algorithms::shard_config shard;
  std::size_t batch_size = 64;
  /// Artificial delay per local step (heterogeneity experiments; 0 = none).
  std::chrono::microseconds slowdown{0};
  /// Limits for decoding averager messages.
  codec_limits limits;
  /// How to connect to the shard owners of a sharded job (their endpoints come in WELCOME).
  connect_options owner_connect;
  /// Called on the actor's strand once the job is over for this worker (STOP or left).
  std::function<void(bool stopped_by_averager)> on_finished;
  /// Called on the actor's strand, before on_finished, when the averager refused the JOIN (the reason).
  std::function<void(const std::string& reason)> on_refused;
  /// Called on the actor's strand, before on_finished, when no averager welcomed the worker within
  /// core.join_timeout (what it waited for).
  std::function<void(const std::string& what)> on_gave_up;
};

/// Runs a worker_core as an actor, the shell around the sans-IO core: decodes the averager's messages and
/// feeds them to the core, then carries out the returned `actions` — sends to the averager, trains I_i
/// local steps on the compute pool (never on its strand) and hands the result back, arms the core's
/// timer. The core joins, accepts RESTARTs, submits MODEL, heartbeats and rejoins a restarted averager.
/// Thread contract: all members run on the actor's strand; the training state is handed to exactly one
/// compute job at a time and is not touched by the strand meanwhile.
class worker_actor : public actor {
 public:
  explicit worker_actor(worker_actor_config config);
  ~worker_actor() override;

  void on_start() override;

  /// Takes the transport and the averager's peer id (called once, right after spawn).
  void attach(std::shared_ptr<transport> link, peer_id averager);
  /// Handles one multipart message from the averager.
  void on_wire(peer_id peer, multipart msg);
  /// Leaves the job gracefully: LEAVE to the averager, then finished.
  void leave();
  /// Returns how many MODEL messages were sent (for tests).
  [[nodiscard]] std::uint64_t models_sent() const;
  /// Returns the protocol state (for tests).
  [[nodiscard]] worker_state state() const;
  /// Returns the averager's reason when it refused this worker (empty otherwise).
  [[nodiscard]] const std::string& refusal() const noexcept { return refusal_; }

  /// Holds the model, optimiser and sampler; owned by one compute job at a time.
  struct trainer;

 private:
  /// Carries out what the core asked for, in the order of the fields of `actions`.
  void apply(actions a);
  void start_task(train_task t);
  void rearm(std::optional<clock_source::time_point> wakeup);

  worker_actor_config config_;
  std::optional<worker_core> core_;
  std::shared_ptr<transport> link_;
  peer_id averager_ = 0;
  std::shared_ptr<trainer> trainer_;
  bool busy_ = false;
  std::optional<train_task> queued_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::optional<timer_id> timer_;
  bool finished_ = false;
  std::string refusal_;
  // Sharded averaging: the owners named in WELCOME (owner k at index k), and x̄ being assembled.
  /// Connects to the owners a WELCOME names (once) and tells them the member's connection.
  void attach_owners(const welcome_msg& w);
  /// Handles SHARD_AVERAGE from owner `k`.
  void on_owner(std::size_t k, multipart msg);
  /// Hands the held RESTART to the core once every owner's slice of its x̄ is in.
  void try_restart();
  /// Sends `m`'s slices to the owners and its header to the averager.
  void send_sliced(const model_msg& m);
  /// Returns the model this worker built while the trainer still holds it (no task has run), else nothing.
  [[nodiscard]] std::span<const float> own_params() const;
  std::vector<std::string> owner_endpoints_;
  /// WELCOME's upload_buffer the connections in owners_ were made with.
  std::uint64_t upload_buffer_ = 0;
  /// WELCOME's compress: slices to owners on other hosts travel compressed.
  bool compress_ = false;
  std::vector<peer_id> owners_;
  /// The owners whose endpoints are on this host (for a ring gather's home owner).
  std::vector<std::uint64_t> local_owners_;
  std::uint64_t model_size_ = 0;
  member_id member_ = 0;
  session_token token_ = 0;
  std::optional<restart_msg> held_restart_;
  round_t slices_round_ = 0;
  std::vector<flat_buffer> slices_;
  /// Per slice: the round its change is against (a lossy wire dtype), or none for a whole slice.
  std::vector<std::optional<round_t>> slice_bases_;
  /// The checksum of each slice of the model this worker built, sent to the owners until its first RESTART:
  /// an owner whose slice of x̄ is the same (a fresh job's x̄_0) confirms it instead of sending it.
  std::vector<std::uint64_t> own_checksums_;
  /// The checksum of the whole model this worker built (JOIN's `holds` until a task has run), and whether
  /// a task has run (then the trainer's model is no longer that one) or the worker gave its own model up.
  std::optional<std::uint64_t> own_checksum_;
  bool trained_ = false;
  rate_limiter malformed_warnings_;  // malformed input from the averager's connection: a few lines per 10 s
};

/// Spawns a worker_actor, makes its transport with `make_link`, connects to `averager_endpoint` and
/// starts joining. `connect` carries the averager's CURVE server key when the transport is secured.
[[nodiscard]] expected<actor_ref<worker_actor>> start_worker(actor_system& system, worker_actor_config config,
                                                             const transport_factory& make_link,
                                                             const std::string& averager_endpoint,
                                                             std::shared_ptr<transport>* link_out = nullptr,
                                                             const connect_options& connect = {});

}  // namespace prsgd::actors
