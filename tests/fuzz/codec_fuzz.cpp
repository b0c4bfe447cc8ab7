// SPDX-License-Identifier: Apache-2.0
// Fuzzes the training codec: decode_to_worker, decode_to_averager, decode_to_operator and decode_to_evaluator on
// the same message. Input: the message's frames, split at the part separator (frame 0 the msgpack header, frame 1
// the model floats). Property:
// whatever decodes re-encodes to a message that decodes again, and encoding that gives the same bytes
// (encode(decode(encode(m))) == encode(m): the encoding is canonical and loses no field).
#include <cstddef>
#include <cstdint>

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
  const prsgd::actors::codec_limits defaults;
  check_round_trip(msg, defaults, to_worker);
  check_round_trip(msg, defaults, to_averager);
  check_round_trip(msg, defaults, to_operator);
  check_round_trip(msg, defaults, to_evaluator);
  // Tight limits reach the size checks with small inputs (no round trip: a re-encoded header may be
  // longer than the input's, e.g. with a field the input left out, and so legitimately over the limit).
  const prsgd::actors::codec_limits tight{.max_header_bytes = 64, .max_model_floats = 4};
  (void)prsgd::actors::decode_to_worker(msg, tight);
  (void)prsgd::actors::decode_to_averager(msg, tight);
  (void)prsgd::actors::decode_to_evaluator(msg, tight);
  (void)prsgd::actors::payload_bytes(msg);
  return 0;
}

// The seeds: ops/fuzz.sh --make-seeds writes them to tests/fuzz/corpus/codec/ from the real encoder's output.
namespace {

namespace act = prsgd::actors;
using prsgd::fuzz::join_frames;

act::flat_buffer floats(std::vector<float> v) { return std::make_shared<const std::vector<float>>(std::move(v)); }

void make_seeds(const prsgd::fuzz::seed_sink& seed) {
  const auto model = floats({0.5F, -1.25F, 3.0F});
  const std::vector<std::pair<std::string, act::any_msg>> messages{
      {"join", act::join_msg{3, 1700000000123, 0, 0, 1.5}},
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
      {"join-initial-model",
       act::join_msg{0, 1700000000123, 0, 0, 0.0, "external params=3", "external n=60000", model}},
      {"evaluator-hello", act::evaluator_hello_msg{0, 99, 42, 0, "external params=3"}},
      {"evaluate", act::evaluate_msg{0, 99, 42, 12, 5, model}},
      {"evaluation", act::evaluation_msg{0, 99, 42, 12, 5, 0.875}},
  };
  for (const auto& [name, msg] : messages) {
    seed(name, join_frames(act::encode(msg)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  prsgd::fuzz::write_seeds_if_asked("codec", make_seeds);
  return 0;
}
