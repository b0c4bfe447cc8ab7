// SPDX-License-Identifier: Apache-2.0
// Fuzzes the training codec: every decoder (decode_to_worker, decode_to_averager, decode_to_operator,
// decode_to_evaluator and decode_shard) on the same message. Input: the message's frames, split at the part
// separator (frame 0 the msgpack header, frame 1 the model floats). Property:
// whatever decodes re-encodes to a message that decodes again, and encoding that gives the same bytes
// (encode(decode(encode(m))) == encode(m): the encoding is canonical and loses no field).
#include <msgpack.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "frames.hpp"
#include "fuzz_input.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/transport/frame.hpp"

namespace {

using prsgd::multipart;

template <class Decode>
void check_round_trip(const multipart& msg, const prsgd::actors::codec_limits& limits, Decode decode) {
  auto first = decode(msg, limits);
  if (!first) {
    return;
  }
  const multipart encoded = prsgd::actors::encode(*first);
  auto second = decode(encoded, limits);
  PRSGD_FUZZ_CHECK(second.has_value(), "a decoded message, encoded again, does not decode");
  PRSGD_FUZZ_CHECK(second->index() == first->index(), "a message changed its type in a round trip");
  PRSGD_FUZZ_CHECK(prsgd::fuzz::same_frames(prsgd::actors::encode(*second), encoded),
                   "a message changed in a round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const prsgd::multipart msg = prsgd::fuzz::frames_of(data, size);
  const auto to_worker = [](const multipart& m, const prsgd::actors::codec_limits& l) {
    return prsgd::actors::decode_to_worker(m, l);
  };
  const auto to_averager = [](const multipart& m, const prsgd::actors::codec_limits& l) {
    return prsgd::actors::decode_to_averager(m, l);
  };
  const auto to_operator = [](const multipart& m, const prsgd::actors::codec_limits& l) {
    return prsgd::actors::decode_to_operator(m, l);
  };
  const auto to_evaluator = [](const multipart& m, const prsgd::actors::codec_limits& l) {
    return prsgd::actors::decode_to_evaluator(m, l);
  };
  const auto to_shard = [](const multipart& m, const prsgd::actors::codec_limits& l) {
    return prsgd::actors::decode_shard(m, l);
  };
  const prsgd::actors::codec_limits defaults;
  check_round_trip(msg, defaults, to_worker);
  check_round_trip(msg, defaults, to_averager);
  check_round_trip(msg, defaults, to_operator);
  check_round_trip(msg, defaults, to_evaluator);
  check_round_trip(msg, defaults, to_shard);
  // Tight limits reach the size checks with small inputs (no round trip: a re-encoded header may be
  // longer than the input's, e.g. with a field the input left out, and so legitimately over the limit).
  const prsgd::actors::codec_limits tight{.max_header_bytes = 64, .max_model_floats = 4};
  (void)prsgd::actors::decode_to_worker(msg, tight);
  (void)prsgd::actors::decode_to_averager(msg, tight);
  (void)prsgd::actors::decode_to_evaluator(msg, tight);
  (void)prsgd::actors::decode_shard(msg, tight);
  (void)prsgd::actors::payload_bytes(msg);
  return 0;
}

// The seeds: ops/fuzz.sh --make-seeds writes them to tests/fuzz/corpus/codec/ from the real encoder's output.
namespace {

namespace act = prsgd::actors;
using prsgd::fuzz::join_frames;

act::flat_buffer floats(std::vector<float> v) { return std::make_shared<const std::vector<float>>(std::move(v)); }

// A job status with a member, a joiner and a removed member: STATUS_REPLY's second frame holds every field kind.
std::shared_ptr<const act::job_status> sample_status() {
  act::job_status s;
  s.model = "fmnist-mlp";
  s.fingerprint = "fmnist-mlp:535818";
  s.state = "collecting";
  s.averager_incarnation = 1700000000123;
  s.round = 12;
  s.trained_rounds = 11;
  s.epoch = 0.75;
  s.rule = "samples";
  s.aggregation = "median";
  s.interval_policy = "fixed";
  s.interval = 8;
  s.deadline = "none";
  s.test_acc = 0.8525;
  s.accepted = 22;
  s.bytes_in = 1 << 20;
  s.members.push_back({.id = 3,
                       .host = "127.0.0.1",
                       .incarnation = 99,
                       .state = "training",
                       .interval = 8,
                       .steps_per_s = 120.5,
                       .idle_last_s = 0.25,
                       .idle_mean_s = 0.5,
                       .last_seen_s = 1});
  s.pending.push_back({.id = 4, .incarnation = 100, .state = "joining"});
  s.removed.push_back({.id = 2, .incarnation = 98, .round = 9, .ago_s = 3.5, .reason = "heartbeat timeout"});
  return std::make_shared<const act::job_status>(std::move(s));
}

// One seed: a message of either family (any_msg or shard_msg) encoded by the real encoder. A new message
// type is one more row of the table in make_seeds; check_every_type refuses a seed set that misses one.
struct seed_message {
  template <class M>
  seed_message(std::string n, const M& m) : name(std::move(n)), frames(encode_any(m)) {}

  template <class M>
  static multipart encode_any(const M& m) {
    if constexpr (std::is_constructible_v<act::any_msg, M>) {
      return act::encode(act::any_msg{m});
    } else {
      return act::encode(act::shard_msg{m});
    }
  }

  std::string name;
  multipart frames;
};

// Returns the type code ("t") of an encoded message's header.
unsigned type_of(const multipart& msg) {
  const auto handle = msgpack::unpack(reinterpret_cast<const char*>(msg.front().data()), msg.front().size());
  const msgpack::object_map map = handle.get().via.map;
  for (std::uint32_t i = 0; i < map.size; ++i) {
    if (map.ptr[i].key.as<std::string>() == "t") {
      return map.ptr[i].val.as<unsigned>();
    }
  }
  return 0;
}

// Returns true when the codec knows message type `t`: some decoder refuses a bare header of that type for
// another reason than an unknown type (a missing field, a type not meant for it).
bool codec_knows_type(unsigned t) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(2);
  pk.pack(std::string_view{"v"});
  pk.pack(act::protocol_version);
  pk.pack(std::string_view{"t"});
  pk.pack(t);
  const multipart msg{prsgd::frame::copy(buf.data(), buf.size())};
  const auto known = [](const auto& result) {
    return result.has_value() || result.error().context.rfind("unknown message type", 0) != 0;
  };
  return known(act::decode_to_worker(msg)) || known(act::decode_to_averager(msg)) ||
         known(act::decode_to_operator(msg)) || known(act::decode_to_evaluator(msg)) || known(act::decode_shard(msg));
}

// Stops seed generation when a seed does not decode, or when a message type the codec knows has no seed.
void check_every_type(const std::vector<seed_message>& messages) {
  std::set<unsigned> seeded;
  for (const auto& m : messages) {
    const bool decodes = act::decode_to_worker(m.frames).has_value() || act::decode_to_averager(m.frames).has_value() ||
                         act::decode_to_operator(m.frames).has_value() ||
                         act::decode_to_evaluator(m.frames).has_value() || act::decode_shard(m.frames).has_value();
    if (!decodes) {
      std::fprintf(stderr, "codec seeds: seed '%s' does not decode\n", m.name.c_str());
      std::exit(1);
    }
    seeded.insert(type_of(m.frames));
  }
  for (unsigned t = 1; t < 256; ++t) {
    if (codec_knows_type(t) && seeded.count(t) == 0) {
      std::fprintf(stderr, "codec seeds: message type %u has no seed (add a row to make_seeds)\n", t);
      std::exit(1);
    }
  }
}

// 256 values with few different exponents, so that a compressed payload comes out smaller than the raw one.
act::flat_buffer compressible() {
  std::vector<float> v(256);
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = (i % 2 == 0 ? 1.0F : -1.0F) * (0.5F + static_cast<float>(i) / 1024.0F);
  }
  return floats(std::move(v));
}

template <class M>
M compressed(M m) {
  m.compressed = true;
  return m;
}

void make_seeds(const prsgd::fuzz::seed_sink& seed) {
  const auto model = floats({0.5F, -1.25F, 3.0F});
  const auto big = compressible();
  const std::vector<seed_message> messages{
      {"join", act::join_msg{3, 1700000000123, 0, 0, 1.5}},
      {"join-fingerprints", act::join_msg{.incarnation = 77,
                                          .averager_incarnation = 5,
                                          .speed_hint = 0.5,
                                          .model_fingerprint = "fmnist-mlp:535818",
                                          .data_fingerprint = "60000x784:c0ffee"}},
      {"refused",
       act::refused_msg{.incarnation = 77, .averager_incarnation = 5, .reason = "model fingerprint differs"}},
      {"welcome-token",
       act::welcome_msg{
           .member = 3,
           .incarnation = 77,
           .averager_incarnation = 5,
           .round = 7,
           .admitted_round = 8,
           .model_size = 535818,
           .heartbeat_interval = std::chrono::milliseconds{250},
           .token = 0x0123456789abcdef,
           .shard_index = 1,
           .num_shards = 4,
           .spec = {.model = "fmnist-mlp:535818", .data = "60000x784:c0ffee", .batch_size = 64, .seed = 1}}},
      {"leave-token", act::leave_msg{3, 77, 5, 9, 0x0123456789abcdef}},
      {"heartbeat-token", act::heartbeat_msg{3, 77, 5, 9, false, 0x0123456789abcdef}},
      {"model-token-cut", act::model_msg{3, 77, 5, 9, 6, 384, 4.5, 6, false, model, 0x0123456789abcdef, true}},
      {"status", act::status_request_msg{}},
      {"status-reply",
       act::status_reply_msg{.averager_incarnation = 1700000000123, .round = 12, .status = sample_status()}},
      {"status-reply-empty", act::status_reply_msg{}},
      {"control-pause", act::control_msg{.op = act::control_op::pause}},
      {"control-set-interval", act::control_msg{.round = 12, .op = act::control_op::set_interval, .arg = "16"}},
      {"control-set-deadline", act::control_msg{.op = act::control_op::set_deadline, .arg = "fixed:2.5"}},
      {"control-remove", act::control_msg{.op = act::control_op::remove, .arg = "3"}},
      {"control-reply", act::control_reply_msg{.round = 12, .ok = true, .text = "interval 16 from round 13"}},
      {"control-reply-refused", act::control_reply_msg{.ok = false, .text = "not allowed for this key"}},
      {"welcome", act::welcome_msg{3, 1700000000123, 42, 7, 7, act::training_mode::restarted_sgd, 3,
                                   std::chrono::milliseconds{500}}},
      {"welcome-minibatch",
       act::welcome_msg{1, 2, 3, 4, 4, act::training_mode::minibatch_sgd, 0, std::chrono::seconds{1}}},
      {"leave", act::leave_msg{3, 1700000000123, 42, 9}},
      {"heartbeat-worker", act::heartbeat_msg{3, 1700000000123, 42, 9, false}},
      {"heartbeat-averager", act::heartbeat_msg{3, 1700000000123, 42, 9, true}},
      {"model", act::model_msg{3, 1700000000123, 42, 9, 8, 512, 12.5, 8, false, model}},
      {"model-gradient-empty", act::model_msg{0, 1, 1, 0, 1, 32, 0.25, 1, true, floats({})}},
      {"restart", act::restart_msg{3, 1700000000123, 42, 10, model, 8, 0.05, act::training_mode::restarted_sgd, {}}},
      {"restart-empty", act::restart_msg{0, 1, 1, 0, nullptr, 1, 0.0, act::training_mode::minibatch_sgd, {}}},
      {"restart-ranges",
       act::restart_msg{
           3, 1700000000123, 42, 10, model, 8, 0.05, act::training_mode::restarted_sgd, {{0, 256}, {1024, 1100}}}},
      {"removed", act::removed_msg{3, 1700000000123, 42, 11}},
      {"stop", act::stop_msg{3, 1700000000123, 42, 12}},
      {"join-holds", act::join_msg{.incarnation = 77, .sharding = true, .holds = 0xcbf29ce484222325}},
      {"restart-held", act::restart_msg{.member = 3,
                                        .incarnation = 77,
                                        .averager_incarnation = 5,
                                        .interval = 8,
                                        .step_size = 0.05,
                                        .held = 0xcbf29ce484222325}},
      {"join-initial-model",
       act::join_msg{0, 1700000000123, 0, 0, 0.0, "external params=3", "external n=60000", model}},
      {"evaluator-hello", act::evaluator_hello_msg{0, 99, 42, 0, "external params=3"}},
      {"evaluate", act::evaluate_msg{0, 99, 42, 12, 5, model}},
      {"evaluation", act::evaluation_msg{0, 99, 42, 12, 5, 0.875, 0.3125}},
      {"evaluation-no-loss", act::evaluation_msg{0, 99, 42, 12, 5, 0.875}},
      {"spec", act::spec_request_msg{0, 1700000000123, 0, 0}},
      {"spec-reply", act::spec_reply_msg{0, 1700000000123, 42, 12,
                                         act::job_spec{"fmnist-mlp in=1x28x28 out=10 params=3",
                                                       "fashion-mnist n=60000",
                                                       64,
                                                       1,
                                                       prsgd::algorithms::wire_dtype::bf16,
                                                       "fmnist-mlp",
                                                       "csv",
                                                       {"label-column=last"},
                                                       true,
                                                       0.5,
                                                       0.05,
                                                       0.9,
                                                       false},
                                         act::training_mode::restarted_sgd, 3}},
      {"shard-hello", act::shard_hello_msg{.incarnation = 77,
                                           .averager_incarnation = 5,
                                           .round = 9,
                                           .shard = 1,
                                           .shards = 4,
                                           .endpoint = "tcp://10.0.0.2:5571",
                                           .ready = true}},
      {"shard-setup", act::shard_setup_msg{.incarnation = 77,
                                           .averager_incarnation = 5,
                                           .round = 9,
                                           .shard = 1,
                                           .shards = 4,
                                           .offset = 3,
                                           .model_size = 12,
                                           .heartbeat_interval = std::chrono::milliseconds{250},
                                           .model = model}},
      {"shard-setup-ring", act::shard_setup_msg{.incarnation = 77,
                                                .averager_incarnation = 5,
                                                .round = 9,
                                                .shard = 1,
                                                .shards = 4,
                                                .offset = 3,
                                                .model_size = 12,
                                                .heartbeat_interval = std::chrono::milliseconds{250},
                                                .model = model,
                                                .ring = true,
                                                .ring_next = "tcp://10.0.0.3:5571"}},
      {"shard-round", act::shard_round_msg{.averager_incarnation = 5,
                                           .round = 10,
                                           .combine = true,
                                           .inputs = {{3, 0x0123456789abcdef, 512, 8}, {4, 42, 384, 6}},
                                           .rule = 1,
                                           .aggregate = 2,
                                           .trim = 0.25,
                                           .recipients = {{3, 0x0123456789abcdef}, {4, 42}},
                                           .fetch = true}},
      {"shard-round-add", act::shard_round_msg{.averager_incarnation = 5, .round = 10, .recipients = {{5, 7}}}},
      {"shard-slice", act::shard_slice_msg{3, 0x0123456789abcdef, 9, 1, model}},
      {"shard-slice-hello", act::shard_slice_msg{3, 0x0123456789abcdef, 9, 1, nullptr}},
      {"shard-ack", act::shard_ack_msg{3, 0x0123456789abcdef, 9, 1, true, 0.125}},
      {"shard-average", act::shard_average_msg{3, 0x0123456789abcdef, 10, 1, model}},
      {"shard-slice-home", act::shard_slice_msg{.member = 3, .token = 42, .shard = 1, .home = 2}},
      {"shard-slice-holds",
       act::shard_slice_msg{.member = 3, .token = 42, .shard = 1, .home = 2, .holds = 0xcbf29ce484222325}},
      {"shard-average-held", act::shard_average_msg{.member = 3, .token = 42, .shard = 1, .held = 0xcbf29ce484222325}},
      {"shard-relay",
       act::shard_relay_msg{.averager_incarnation = 5, .round = 10, .shard = 2, .model = model, .offset = 16384}},
      {"shard-relay-change", act::shard_relay_msg{.averager_incarnation = 5,
                                                  .round = 10,
                                                  .shard = 2,
                                                  .model = model,
                                                  .dtype = prsgd::algorithms::wire_dtype::bf16,
                                                  .base = 9}},
      {"shard-slice-compressed", compressed(act::shard_slice_msg{3, 0x0123456789abcdef, 9, 1, big})},
      {"shard-average-compressed-bf16",
       compressed(act::shard_average_msg{3, 42, 10, 1, big, prsgd::algorithms::wire_dtype::bf16, 9})},
      {"shard-relay-compressed-f16", compressed(act::shard_relay_msg{.averager_incarnation = 5,
                                                                     .round = 10,
                                                                     .shard = 2,
                                                                     .model = big,
                                                                     .dtype = prsgd::algorithms::wire_dtype::f16,
                                                                     .base = 9})},
      {"join-reads-compressed", act::join_msg{.incarnation = 77, .sharding = true, .reads_compressed = true}},
      {"shard-hello-reads-compressed",
       act::shard_hello_msg{
           .incarnation = 77, .shard = 1, .shards = 4, .endpoint = "tcp://10.0.0.2:5571", .reads_compressed = true}},
      {"shard-report", act::shard_report_msg{77, 5, 10, 1, 0xcbf29ce484222325, true, "", model}},
      {"shard-report-failed", act::shard_report_msg{77, 5, 10, 1, 0, false, "slice of member 4 missing", nullptr}},
  };
  check_every_type(messages);
  for (const auto& m : messages) {
    seed(m.name, join_frames(m.frames));
  }
  // Regression: a status whose member list claims 2^32 - 1 entries (msgpack allocated them all up front).
  auto huge = act::encode(act::any_msg{act::status_reply_msg{}});
  const std::vector<std::uint8_t> claim{0x81, 0xa7, 'm', 'e', 'm', 'b', 'e', 'r', 's', 0xdd, 0xff, 0xff, 0xff, 0xff};
  huge.at(1) = prsgd::frame::copy(claim.data(), claim.size());
  seed("status-reply-huge-list", join_frames(huge));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  prsgd::fuzz::write_seeds_if_asked("codec", make_seeds);
  return 0;
}
