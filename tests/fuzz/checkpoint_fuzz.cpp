// SPDX-License-Identifier: Apache-2.0
// Fuzzes the checkpoint reader, decode_checkpoint. Two inputs per run: the bytes as they are (the header
// checks), and, since random bytes almost never carry a matching CRC-32, a well-formed header made for
// them: byte 0 picks the format version, the rest is the payload (the payload parser).
// Property: a checkpoint that decodes encodes back to the same bytes (version 2, the one written), or,
// for version 1, to a version-2 checkpoint that decodes to the same state.
#include <zlib.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_input.hpp"
#include "prsgd/actors/checkpoint.hpp"

namespace {

// magic, version, payload size, CRC-32 (actors/src/checkpoint.cpp).
constexpr std::size_t header_size = 8 + 4 + 8 + 4;

template <class T>
void put(std::vector<unsigned char>& out, T v) {
  const auto* p = reinterpret_cast<const unsigned char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

// The header encode_checkpoint writes (actors/src/checkpoint.cpp), around `payload`.
std::vector<unsigned char> with_header(std::uint32_t version, const std::uint8_t* payload, std::size_t size) {
  std::vector<unsigned char> out{'P', 'R', 'S', 'G', 'D', 'C', 'K', 'P'};
  put<std::uint32_t>(out, version);
  put<std::uint64_t>(out, size);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(crc32(crc32(0L, Z_NULL, 0), payload, static_cast<uInt>(size))));
  out.insert(out.end(), payload, payload + size);
  return out;
}

void check(const std::vector<unsigned char>& bytes) {
  auto state = prsgd::actors::decode_checkpoint(bytes);
  if (!state) {
    return;
  }
  const std::vector<unsigned char> encoded = prsgd::actors::encode_checkpoint(*state);
  std::uint32_t version = 0;
  std::uint32_t current = 0;  // the version encode_checkpoint writes
  std::memcpy(&version, bytes.data() + 8, sizeof version);
  std::memcpy(&current, encoded.data() + 8, sizeof current);
  if (version == current) {
    PRSGD_FUZZ_CHECK(encoded == bytes, "a checkpoint of the current version does not encode back to its bytes");
    return;
  }
  auto again = prsgd::actors::decode_checkpoint(encoded);
  PRSGD_FUZZ_CHECK(again.has_value(), "a decoded checkpoint, encoded again, does not decode");
  PRSGD_FUZZ_CHECK(prsgd::actors::encode_checkpoint(*again) == encoded, "a checkpoint changed in a round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check(std::vector<unsigned char>(data, data + size));
  if (size >= 1 && size - 1 <= (std::size_t{1} << 30)) {
    check(with_header(data[0], data + 1, size - 1));
  }
  return 0;
}

// The seeds: ops/fuzz.sh --make-seeds writes them to tests/fuzz/corpus/checkpoint/ from the real encoder's output.
namespace {

namespace act = prsgd::actors;
using bytes = std::vector<std::uint8_t>;

void make_seeds(const prsgd::fuzz::seed_sink& seed) {
  act::checkpoint_state plain;
  plain.averager_incarnation = 1700000000123;
  plain.round = 12;
  plain.model = {0.5F, -1.0F, 2.0F, 0.0F};
  plain.members = {{0, 11, 8, 120.5}, {1, 12, 4, 60.0}};
  plain.rounds_completed = 12;
  plain.arrival_history = {0.1, 0.25};
  plain.late = 1;
  plain.duplicate = 2;
  plain.rejected = 3;
  act::checkpoint_state full = plain;
  full.outer_momentum = {0.01F, 0.02F, 0.03F, 0.04F};
  full.identity = act::checkpoint_model{"fmnist-mlp", 1, 28, 28, 10, "fashion-mnist", "0123abcd"};
  const act::checkpoint_state empty;
  for (const auto& [name, s] : {std::pair{"plain", plain}, std::pair{"identity", full}, std::pair{"empty", empty}}) {
    const bytes encoded = act::encode_checkpoint(s);
    seed(std::string(name) + "-file", encoded);
    // The target's second form: the version byte, then the payload (it writes the header itself).
    bytes v2{2};
    v2.insert(v2.end(), encoded.begin() + header_size, encoded.end());
    seed(std::string(name) + "-payload-v2", v2);
    if (!s.identity) {
      // A version-1 payload is version 2's without the trailing "no identity" byte.
      bytes v1{1};
      v1.insert(v1.end(), encoded.begin() + header_size, encoded.end() - 1);
      seed(std::string(name) + "-payload-v1", v1);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  prsgd::fuzz::write_seeds_if_asked("checkpoint", make_seeds);
  return 0;
}
