// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/worker_actor.hpp"

#include "wire_link.hpp"

#include <algorithm>
#include <thread>
#include <tuple>
#include <utility>

#include "prsgd/actors/shard_owner_core.hpp"
#include "prsgd/algorithms/model.hpp"
#include "prsgd/algorithms/sample_pool.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/transport/endpoint.hpp"

namespace prsgd::actors {

struct worker_actor::trainer {
  std::unique_ptr<algorithms::model> model;
  std::optional<algorithms::sgd> optimiser;
  std::optional<algorithms::shard_sampler> sampler;
  /// The shard, batch size and seed `sampler` was made for.
  std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t> sampled{};
};

namespace {

// Runs one train_task on the compute pool. Touches only `t` (owned by this job) and read-only data.
// Makes the sampler for the shard the averager assigned (again when the assignment changes). The task's batch
// size and seed are the job's (WELCOME); zero means the worker's own.
void fit_sampler(worker_actor::trainer& t, const algorithms::dataset& data, const train_task& task,
                 algorithms::shard_config shard, std::size_t own_batch) {
  const std::uint64_t batch = task.batch_size > 0 ? task.batch_size : own_batch;
  const std::uint64_t seed = task.batch_size > 0 ? task.seed : shard.seed;
  const auto key = std::make_tuple(task.shard_index, task.num_shards, batch, seed);
  if (t.sampler && t.sampled == key) {
    return;
  }
  shard.seed = seed;
  auto s = algorithms::shard_sampler::make(data.labels, static_cast<int>(task.shard_index),
                                           static_cast<int>(task.num_shards), shard, static_cast<std::size_t>(batch));
  if (!s) {
    throw std::runtime_error("cannot shard the data: " + s.error().message());
  }
  t.sampler.emplace(std::move(*s));
  t.sampled = key;
}

// Yields the batches of one round: from the samples the averager gave the member (RESTART's ranges) in
// the member's own order, or from the shard's sampler when the averager gives none.
class round_batches {
 public:
  round_batches(worker_actor::trainer& t, const algorithms::dataset& data, const train_task& task,
                const algorithms::shard_config& shard, std::size_t own_batch)
      : t_(t) {
    if (task.ranges.empty()) {
      fit_sampler(t, data, task, shard, own_batch);
      return;
    }
    if (data.size() == 0) {
      throw std::runtime_error("the averager gave sample ranges, the training set is empty");
    }
    // The ranges name positions of each epoch's permutation of the data set (actors/PROTOCOL.md): a data set
    // stored sorted by label still gives a member samples of every class.
    order_ = algorithms::shuffled_samples(task.ranges, data.size(), task.seed, task.round, task.member);
    batch_ = static_cast<std::size_t>(task.batch_size > 0 ? task.batch_size : own_batch);
  }
  std::span<const std::size_t> next() {
    if (order_.empty()) {
      return t_.sampler->next_batch();
    }
    if (pos_ >= order_.size()) {
      pos_ = 0;  // more steps than the ranges hold: the averager never asks for that; start over
    }
    const std::size_t n = std::min(batch_, order_.size() - pos_);
    std::span<const std::size_t> b{order_.data() + pos_, n};
    pos_ += n;
    return b;
  }

 private:
  worker_actor::trainer& t_;
  std::vector<std::size_t> order_;
  std::size_t batch_ = 1;
  std::size_t pos_ = 0;
};

train_result run_task(worker_actor::trainer& t, const algorithms::dataset& data, const train_task& task,
                      const algorithms::shard_config& shard, std::size_t own_batch, bool keep_momentum,
                      std::chrono::microseconds slowdown, const std::atomic<bool>& cancel) {
  train_result r;
  r.round = task.round;
  round_batches batches{t, data, task, shard, own_batch};
  auto ok = t.model->set_params(*task.model);
  if (!ok) {
    throw std::runtime_error("restart model does not fit: " + ok.error().message());
  }
  if (task.mode == training_mode::minibatch_sgd) {
    auto batch = batches.next();
    const float loss = t.model->forward_backward(data, batch);
    // Gradients for the trainable prefix; the buffers after it (batch-norm running statistics, updated by
    // this forward pass) go as values, which the averager averages instead of stepping.
    auto g = t.model->grads();
    auto values = t.model->params();
    auto grad = std::make_shared<std::vector<float>>(values.begin(), values.end());
    std::copy(g.begin(), g.end(), grad->begin());
    r.steps = 1;
    r.samples = batch.size();
    r.loss_sum = static_cast<double>(loss) * static_cast<double>(batch.size());
    r.loss_count = batch.size();
    r.params = std::move(grad);
    if (slowdown.count() > 0) {
      std::this_thread::sleep_for(slowdown);
    }
    return r;
  }
  if (!keep_momentum) {
    t.optimiser->reset_momentum();
  }
  t.optimiser->set_learning_rate(static_cast<float>(task.step_size));
  for (std::uint64_t s = 0; s < task.interval; ++s) {
    if (cancel.load(std::memory_order_relaxed)) {
      break;
    }
    auto batch = batches.next();
    const float loss = t.model->train_step(data, batch, *t.optimiser);
    r.steps += 1;
    r.samples += batch.size();
    r.loss_sum += static_cast<double>(loss) * static_cast<double>(batch.size());
    r.loss_count += batch.size();
    if (slowdown.count() > 0) {
      // Heterogeneity experiments: an artificially slow worker (documented in docs/cli.md).
      std::this_thread::sleep_for(slowdown);
    }
  }
  auto p = t.model->params();
  r.params = std::make_shared<const std::vector<float>>(p.begin(), p.end());
  return r;
}

}  // namespace

worker_actor::worker_actor(worker_actor_config config)
    : config_(std::move(config)), cancel_(std::make_shared<std::atomic<bool>>(false)) {
  core_.emplace(config_.core, system().engine()->time());
}

worker_actor::~worker_actor() = default;

void worker_actor::on_start() {
  auto t = std::make_shared<trainer>();
  auto m = algorithms::model_registry::instance().make(config_.model_name, config_.model);
  if (!m) {
    PRSGD_LOG(error, "worker") << "cannot build model '" << config_.model_name << "': " << m.error().message();
    quit(m.error());
    return;
  }
  t->model = std::move(*m);
  // The checksum of the model this worker built: its JOIN names it, so that an averager whose x̄ is the same
  // (a fresh job's x̄_0, built from the same seed) need not send it.
  own_checksum_ = slice_checksum(t->model->params());
  auto opt = algorithms::sgd::make(config_.sgd);
  if (!opt) {
    quit(opt.error());
    return;
  }
  t->optimiser.emplace(std::move(*opt));
  if (!config_.train_set) {
    quit(error{errc::invalid_argument, "worker has no training set"});
    return;
  }
  // The sampler is made for the shard the averager assigns (fit_sampler, at the first task).
  trainer_ = std::move(t);
}

void worker_actor::attach(std::shared_ptr<transport> link, peer_id averager) {
  link_ = std::move(link);
  averager_ = averager;
  apply(core_->start());
}

void worker_actor::on_wire(peer_id peer, multipart msg) {
  if (finished_) {
    return;
  }
  if (peer != averager_) {
    if (auto it = std::find(owners_.begin(), owners_.end(), peer); it != owners_.end()) {
      on_owner(static_cast<std::size_t>(it - owners_.begin()), std::move(msg));
    }
    return;
  }
  auto decoded = decode_to_worker(msg, config_.limits);
  if (!decoded) {
    if (malformed_warnings_.allow(now())) {
      PRSGD_LOG(warn, "worker") << "dropped malformed message from the averager: " << decoded.error().message()
                                << malformed_warnings_.suffix();
    }
    return;
  }
  if (const auto* w = std::get_if<welcome_msg>(&*decoded); w != nullptr && !w->owners.empty()) {
    attach_owners(*w);
  }
  if (auto* r = std::get_if<restart_msg>(&*decoded)) {
    PRSGD_LOG(debug, "worker") << "RESTART round " << r->round << " I=" << r->interval;
    if (const auto own = own_params();
        r->held && !r->model && owners_.empty() && !own.empty() && own_checksum_ == *r->held) {
      // x̄ is the model this worker built.
      r->model = std::make_shared<const std::vector<float>>(own.begin(), own.end());
    }
    if ((!r->model || r->model->empty()) && !owners_.empty()) {
      // Sharded: x̄ comes from the owners, slice by slice.
      if (!held_restart_ || held_restart_->round <= r->round) {
        held_restart_ = *r;
      }
      try_restart();
      return;
    }
  }
  apply(core_->on_message(*decoded));
}

// ---- sharded averaging ---------------------------------------------------------------------------------

void worker_actor::attach_owners(const welcome_msg& w) {
  if (w.owners != owner_endpoints_ || w.upload_buffer != upload_buffer_) {
    for (peer_id p : owners_) {
      (void)link_->disconnect(p);
    }
    owners_.clear();
    local_owners_.clear();
    for (std::uint64_t k = 0; k < w.owners.size(); ++k) {
      auto options = config_.owner_connect;
      if (auto ep = endpoint::parse(w.owners[k]); ep && ep->on_this_host()) {
        local_owners_.push_back(k);
      } else {
        // The job's cap on the send buffer of uploads that leave this host (within what SO_SNDBUF takes).
        options.send_buffer_bytes = static_cast<int>(std::min<std::uint64_t>(w.upload_buffer, 1U << 30));
      }
      auto peer = link_->connect(w.owners[k], options);
      if (!peer) {
        PRSGD_LOG(error, "worker") << "cannot connect to shard owner " << w.owners[k] << ": " << peer.error().message();
        owners_.clear();
        local_owners_.clear();
        owner_endpoints_.clear();
        return;
      }
      owners_.push_back(*peer);
    }
    owner_endpoints_ = w.owners;
    upload_buffer_ = w.upload_buffer;
    std::string capped;
    if (upload_buffer_ != 0 && local_owners_.size() < owners_.size()) {
      capped = "; send buffer to the others " + std::to_string(upload_buffer_) + " bytes";
    }
    if (w.compress && local_owners_.size() < owners_.size()) {
      capped += "; slices to the others compressed";
    }
    PRSGD_LOG(info, "worker") << "sharded averaging over " << owners_.size() << " shard owners, "
                              << local_owners_.size() << " on this host" << capped;
  }
  compress_ = w.compress;
  model_size_ = w.model_size;
  if (w.member != member_ || w.token != token_) {
    // A new membership (a rejoin, perhaps with a new averager incarnation): rounds start over.
    member_ = w.member;
    token_ = w.token;
    held_restart_.reset();
    slices_round_ = 0;
    slices_.clear();
    slice_bases_.clear();
  }
  // The home owner: one on this host (spread over them by member id), which sends this member all of x̄ if
  // the job gathers x̄ around a ring. Without one, every owner sends its own slice.
  std::optional<std::uint64_t> home;
  if (!local_owners_.empty()) {
    home = local_owners_[member_ % local_owners_.size()];
  }
  // Before its first RESTART the worker still holds the model it built: tell each owner the checksum of its
  // slice of it, so an owner whose slice of x̄ is the same need not send it.
  own_checksums_.clear();
  if (const auto own = own_params(); own.size() == model_size_) {
    for (std::size_t k = 0; k < owners_.size(); ++k) {
      const auto b = slice_begin(model_size_, owners_.size(), k);
      own_checksums_.push_back(slice_checksum(own.subspan(b, slice_begin(model_size_, owners_.size(), k + 1) - b)));
    }
  }
  for (std::size_t k = 0; k < owners_.size(); ++k) {
    // Tells owner k the connection to send this member's slices of x̄ on.
    shard_slice_msg attach{member_, token_, 0, k, {}};
    attach.home = home;
    if (k < own_checksums_.size()) {
      attach.holds = own_checksums_[k];
    }
    (void)link_->send(owners_[k], encode(shard_msg{attach}));
  }
}

void worker_actor::on_owner(std::size_t from, multipart msg) {
  auto decoded = decode_shard(msg, config_.limits);
  const auto* avg = decoded ? std::get_if<shard_average_msg>(&*decoded) : nullptr;
  // An owner sends its own slice; an owner on this host (the home of a ring gather) may send any slice.
  if (avg == nullptr || avg->member != member_ || avg->token != token_ || avg->shard >= owners_.size()) {
    return;
  }
  const std::size_t k = avg->shard;
  if (k != from && std::find(local_owners_.begin(), local_owners_.end(), from) == local_owners_.end()) {
    return;
  }
  const std::uint64_t begin = slice_begin(model_size_, owners_.size(), k);
  const std::uint64_t size = slice_begin(model_size_, owners_.size(), k + 1) - begin;
  flat_buffer model = avg->model;
  if (const auto own = own_params(); !model && avg->held && k == from && k < own_checksums_.size() &&
                                     *avg->held == own_checksums_[k] && own.size() == model_size_) {
    // The owner's slice of x̄ is the one this worker built (and told it the checksum of).
    const auto part = own.subspan(begin, size);
    model = std::make_shared<const std::vector<float>>(part.begin(), part.end());
  }
  if (!model && avg->held && avg->round >= slices_round_) {
    // A confirmation for a slice this worker no longer holds: nobody would send it, so start over as a new
    // member, which claims to hold nothing and is sent x̄ whole.
    PRSGD_LOG(warn, "worker") << "shard owner " << from << " confirmed slice " << k << " of round " << avg->round
                              << " as one this worker holds, but it does not; rejoining for the whole model";
    trained_ = true;
    own_checksums_.clear();
    apply(core_->on_message(
        to_worker{removed_msg{member_, config_.core.incarnation, core_->averager_incarnation(), avg->round}}));
    return;
  }
  if (!model || model->size() != size || avg->round < slices_round_) {
    return;
  }
  if (avg->round > slices_round_ || slices_.size() != owners_.size()) {
    slices_round_ = avg->round;
    slices_.assign(owners_.size(), flat_buffer{});
    slice_bases_.assign(owners_.size(), std::nullopt);
  }
  slices_[k] = std::move(model);
  slice_bases_[k] = avg->base;
  try_restart();
}

std::span<const float> worker_actor::own_params() const {
  // Until a task has run the trainer's model is the one the worker built, and only this actor touches it.
  if (trained_ || !trainer_ || !trainer_->model) {
    return {};
  }
  return trainer_->model->params();
}

void worker_actor::try_restart() {
  if (!held_restart_ || held_restart_->round != slices_round_ || slices_.size() != owners_.size() ||
      std::any_of(slices_.begin(), slices_.end(), [](const flat_buffer& b) { return !b; })) {
    return;
  }
  auto x = std::make_shared<std::vector<float>>();
  x->reserve(model_size_);
  for (const auto& part : slices_) {
    x->insert(x->end(), part->begin(), part->end());
  }
  restart_msg r = std::move(*held_restart_);
  held_restart_.reset();
  own_checksums_.clear();  // from here on the worker's model is x̄ and what it trains from it
  // Slices that are changes (a lossy wire dtype) are added, in float32, to the slices of the x̄ this worker
  // trained from, as their owners did. Without that x̄ the core gets a change it cannot use and rejoins.
  const auto& ref = core_->restart_model();
  for (std::size_t k = 0; k < slices_.size(); ++k) {
    const auto& base = slice_bases_[k];
    if (!base) {
      continue;
    }
    if (!ref || core_->restart_round() != *base || ref->size() != x->size()) {
      r.base = base;
      break;
    }
    const auto begin = slice_begin(x->size(), slices_.size(), k);
    const auto end = slice_begin(x->size(), slices_.size(), k + 1);
    for (auto i = begin; i < end; ++i) {
      (*x)[i] += (*ref)[i];
    }
  }
  if (!r.base) {
    for (std::size_t k = 0; k < slices_.size(); ++k) {
      const auto b = slice_begin(x->size(), slices_.size(), k);
      const auto e = slice_begin(x->size(), slices_.size(), k + 1);
      PRSGD_LOG(debug, "worker") << "x̄ of round " << r.round << " slice " << k << " checksum "
                                 << slice_checksum(std::span<const float>(*x).subspan(b, e - b));
    }
  }
  r.model = std::move(x);
  apply(core_->on_message(to_worker{std::move(r)}));
}

void worker_actor::send_sliced(const model_msg& m) {
  const std::uint64_t size = m.params->size();
  for (std::size_t k = 0; k < owners_.size(); ++k) {
    const auto begin = static_cast<std::ptrdiff_t>(slice_begin(size, owners_.size(), k));
    const auto end = static_cast<std::ptrdiff_t>(slice_begin(size, owners_.size(), k + 1));
    auto part = std::make_shared<const std::vector<float>>(m.params->begin() + begin, m.params->begin() + end);
    shard_slice_msg slice{m.member, m.token, m.round, k, std::move(part), m.dtype, m.delta};
    slice.compressed = compress_ && std::find(local_owners_.begin(), local_owners_.end(), k) == local_owners_.end();
    if (auto sent = link_->send(owners_[k], encode(shard_msg{std::move(slice)})); !sent) {
      PRSGD_LOG(debug, "worker") << "send to shard owner " << k << " failed: " << sent.error().message();
    }
  }
  model_msg header = m;
  header.params.reset();
  header.sliced = true;
  if (auto sent = link_->send(averager_, encode(to_averager{header})); !sent) {
    PRSGD_LOG(debug, "worker") << "send to averager failed: " << sent.error().message();
  }
}

void worker_actor::leave() {
  if (finished_) {
    return;
  }
  apply(core_->leave());
}

std::uint64_t worker_actor::models_sent() const { return core_->models_sent(); }

worker_state worker_actor::state() const { return core_->state(); }

void worker_actor::apply(actions a) {
  if (link_) {
    for (auto& o : a.sends) {
      if (auto* join = std::get_if<join_msg>(&o.msg)) {
        join->sharding = true;  // this worker can send slices to shard owners
        join->reads_compressed = true;
        if (!trained_) {
          join->holds = own_checksum_;
        }
      }
      if (const auto* m = std::get_if<model_msg>(&o.msg); m != nullptr && !owners_.empty() && m->params) {
        send_sliced(*m);
        continue;
      }
      auto sent = link_->send(averager_, encode(o.msg));
      if (!sent) {
        PRSGD_LOG(debug, "worker") << "send to averager failed: " << sent.error().message();
      }
    }
  }
  if (a.cancel_task && busy_) {
    cancel_->store(true);
  }
  if (a.task) {
    start_task(std::move(*a.task));
  }
  if (a.refused) {
    refusal_ = *a.refused;
    if (config_.on_refused) {
      config_.on_refused(*a.refused);
    }
  }
  if (a.gave_up && config_.on_gave_up) {
    config_.on_gave_up(*a.gave_up);
  }
  if (a.stopped && !finished_) {
    finished_ = true;
    if (timer_) {
      cancel_timer(*timer_);
      timer_.reset();
    }
    queued_.reset();
    cancel_->store(true);
    PRSGD_LOG(info, "worker") << "finished (" << to_string(core_->state()) << ") after " << core_->models_sent()
                              << " models";
    if (config_.on_finished) {
      config_.on_finished(core_->state() == worker_state::stopped);
    }
    return;
  }
  rearm(a.wakeup);
}

void worker_actor::start_task(train_task task) {
  if (!trainer_) {
    return;
  }
  if (busy_) {
    // The running job is obsolete or still finishing; start this one when it hands the trainer back.
    queued_ = std::move(task);
    cancel_->store(true);
    return;
  }
  busy_ = true;
  trained_ = true;  // from here on the trainer's model is no longer the one this worker built
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  auto t = trainer_;
  auto data = config_.train_set;
  auto cancel = cancel_;
  const bool keep = config_.keep_momentum;
  const auto slow = config_.slowdown;
  const auto shard = config_.shard;
  const auto batch = config_.batch_size;
  run_compute([t, data, task = std::move(task), shard, batch, keep, slow,
               cancel]() { return run_task(*t, *data, task, shard, batch, keep, slow, *cancel); },
              [this, cancel](expected<train_result> r) {
                busy_ = false;
                if (finished_) {
                  return;
                }
                if (!r) {
                  PRSGD_LOG(error, "worker") << "training failed: " << r.error().message();
                } else if (!cancel->load()) {
                  apply(core_->on_trained(*r));
                }
                if (queued_ && !busy_) {
                  auto next = std::move(*queued_);
                  queued_.reset();
                  start_task(std::move(next));
                }
              });
}

void worker_actor::rearm(std::optional<clock_source::time_point> wakeup) {
  rearm_once(timer_, finished_ ? std::nullopt : wakeup, [this] {
    if (!finished_) {
      apply(core_->tick());
    }
  });
}

expected<actor_ref<worker_actor>> start_worker(actor_system& system, worker_actor_config config,
                                               const transport_factory& make_link, const std::string& averager_endpoint,
                                               std::shared_ptr<transport>* link_out, const connect_options& connect) {
  auto wired = spawn_wired<worker_actor>(system, std::move(config), make_link);
  if (!wired) {
    return std::move(wired).error();
  }
  auto [handle, shared] = std::move(*wired);
  auto peer = shared->connect(averager_endpoint, connect);
  if (!peer) {
    return std::move(peer).error();
  }
  handle.tell(&worker_actor::attach, shared, *peer);
  if (link_out) {
    *link_out = shared;
  }
  return handle;
}

}  // namespace prsgd::actors
