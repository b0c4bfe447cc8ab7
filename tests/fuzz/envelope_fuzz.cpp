// SPDX-License-Identifier: Apache-2.0
// Fuzzes the wire envelope: wire::decode and wire::peek_request. Input: the message's frames, split at the
// part separator (frame 0 the msgpack header, frames 1..k the payloads).
// Property: whatever decodes re-encodes (the encoder accepts what the decoder accepted), the result
// decodes again, and encoding that gives the same frames (a canonical encoding that loses no field).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "frames.hpp"
#include "fuzz_input.hpp"
#include "prsgd/runtime/envelope.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace wire = prsgd::wire;
  const prsgd::multipart frames = prsgd::fuzz::frames_of(data, size);
  (void)wire::peek_request(frames.front());

  // Small limits reach every bound with small inputs; checksums off reach what follows them.
  wire::limits tight;
  tight.max_header_bytes = 512;
  tight.max_payloads = 2;
  tight.max_payload_bytes = 64;
  tight.max_total_bytes = 600;
  tight.max_name_bytes = 8;
  tight.max_node_bytes = 8;
  tight.max_endpoint_bytes = 16;
  tight.max_context_bytes = 16;
  tight.max_rank = 2;
  tight.verify_checksums = false;
  (void)wire::decode(frames, tight);
  (void)wire::peek_request(frames.front(), tight);

  auto first = wire::decode(frames);
  if (!first) {
    return 0;
  }
  auto encoded = wire::encode(*first);
  PRSGD_FUZZ_CHECK(encoded.has_value(), "the encoder refuses an envelope the decoder accepted");
  auto second = wire::decode(*encoded);
  PRSGD_FUZZ_CHECK(second.has_value(), "a decoded envelope, encoded again, does not decode");
  auto again = wire::encode(*second);
  PRSGD_FUZZ_CHECK(again.has_value() && prsgd::fuzz::same_frames(*again, *encoded),
                   "an envelope changed in a round trip");
  PRSGD_FUZZ_CHECK(second->hdr.type == first->hdr.type && second->hdr.from == first->hdr.from &&
                       second->hdr.to == first->hdr.to && second->hdr.args == first->hdr.args,
                   "header fields changed in a round trip");
  return 0;
}

// The seeds: ops/fuzz.sh --make-seeds writes them to tests/fuzz/corpus/envelope/ from the real encoder's output.
namespace {

namespace wire = prsgd::wire;
using prsgd::fuzz::join_frames;

void make_seeds(const prsgd::fuzz::seed_sink& seed) {
  const auto env = [](wire::message_type t) {
    wire::envelope e;
    e.hdr.type = t;
    return e;
  };
  std::vector<std::pair<std::string, wire::envelope>> seeds;
  {
    auto e = env(wire::message_type::tell);
    e.hdr.from = {"node-1", 7};
    e.hdr.to = {"node-2", 9};
    e.hdr.method = "train";
    e.hdr.args = {std::byte{0x92}, std::byte{0x01}, std::byte{0xa1}, std::byte{'x'}};
    seeds.emplace_back("tell", e);
  }
  {
    auto e = env(wire::message_type::ask);
    e.hdr.from = {"node-1", 7};
    e.hdr.to_name = "prsgd/averager";
    e.hdr.method = "status";
    e.hdr.correlation_id = 17;
    const std::array<float, 2> values{1.0F, -2.0F};
    wire::payload p{prsgd::frame::copy(values.data(), sizeof values), wire::dtype::f32, {2}, std::nullopt};
    p.crc32 = wire::crc32(p.data.bytes());
    e.payloads.push_back(p);
    e.payloads.push_back(wire::payload{prsgd::frame::copy("raw"), wire::dtype::bytes, {}, std::nullopt});
    seeds.emplace_back("ask-payloads", e);
  }
  {
    auto e = env(wire::message_type::reply);
    e.hdr.correlation_id = 17;
    e.hdr.args = {std::byte{0xc3}};
    seeds.emplace_back("reply", e);
  }
  {
    auto e = env(wire::message_type::error);
    e.hdr.correlation_id = 17;
    e.hdr.error_code = prsgd::errc::not_found;
    e.hdr.error_context = "no actor named prsgd/averager";
    seeds.emplace_back("error", e);
  }
  {
    auto e = env(wire::message_type::spawn);
    e.hdr.correlation_id = 3;
    e.hdr.type_name = "worker";
    e.hdr.name = "w0";
    e.hdr.node = "node-2";
    seeds.emplace_back("spawn", e);
  }
  for (const auto t : {wire::message_type::monitor, wire::message_type::demonitor, wire::message_type::down}) {
    auto e = env(t);
    e.hdr.from = {"node-1", 7};
    e.hdr.to = {"node-2", 9};
    if (t == wire::message_type::down) {
      e.hdr.error_code = prsgd::errc::peer_unreachable;
    }
    seeds.emplace_back(std::string(wire::to_string(t)), e);
  }
  for (const auto t : {wire::message_type::heartbeat, wire::message_type::node_down, wire::message_type::leave}) {
    auto e = env(t);
    e.hdr.node = "node-2";
    e.hdr.incarnation = 1700000000123;
    seeds.emplace_back(std::string(wire::to_string(t)), e);
  }
  {
    auto e = env(wire::message_type::register_node);
    e.hdr.correlation_id = 1;
    e.hdr.node = "node-2";
    e.hdr.endpoint = "tcp://127.0.0.1:5555";
    e.hdr.incarnation = 5;
    seeds.emplace_back("register_node", e);
  }
  {
    auto e = env(wire::message_type::register_name);
    e.hdr.correlation_id = 2;
    e.hdr.name = "prsgd/averager";
    e.hdr.from = {"node-1", 7};
    seeds.emplace_back("register_name", e);
  }
  {
    auto e = env(wire::message_type::lookup);
    e.hdr.correlation_id = 4;
    e.hdr.name = "prsgd/averager";
    seeds.emplace_back("lookup", e);
  }
  for (const auto& [name, e] : seeds) {
    auto frames = wire::encode(e);
    if (!frames) {
      std::fprintf(stderr, "fuzz seeds: envelope %s: %s\n", name.c_str(), frames.error().context.c_str());
      std::exit(1);
    }
    seed(name, join_frames(*frames));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  prsgd::fuzz::write_seeds_if_asked("envelope", make_seeds);
  return 0;
}
