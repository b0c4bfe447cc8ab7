// SPDX-License-Identifier: Apache-2.0
// Fuzzes the safetensors reader, decode_safetensors (and its JSON parser). Input: the file's bytes.
// Property: a file that decodes encodes (encode_safetensors accepts what the reader accepted), the result
// decodes again, and encoding that gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_input.hpp"
#include "prsgd/algorithms/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace alg = prsgd::algorithms;
  auto file = alg::decode_safetensors(std::span<const unsigned char>(data, size));
  if (!file) {
    return 0;
  }
  for (const auto& t : file->tensors) {
    PRSGD_FUZZ_CHECK(file->find(t.name) != nullptr, "a decoded tensor cannot be found by its name");
  }
  auto encoded = alg::encode_safetensors(*file);
  PRSGD_FUZZ_CHECK(encoded.has_value(), "the encoder refuses a file the reader accepted");
  auto again = alg::decode_safetensors(*encoded);
  PRSGD_FUZZ_CHECK(again.has_value(), "a decoded file, encoded again, does not decode");
  PRSGD_FUZZ_CHECK(again->tensors.size() == file->tensors.size() && again->metadata == file->metadata,
                   "tensors or metadata changed in a round trip");
  for (std::size_t i = 0; i < file->tensors.size(); ++i) {
    const auto& a = file->tensors[i];
    const auto& b = again->tensors[i];
    PRSGD_FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.data == b.data,
                     "a tensor changed in a round trip");
  }
  auto twice = alg::encode_safetensors(*again);
  PRSGD_FUZZ_CHECK(twice.has_value() && *twice == *encoded, "the encoding is not canonical");
  return 0;
}

// The seeds: ops/fuzz.sh --make-seeds writes them to tests/fuzz/corpus/safetensors/ from the real encoder's output.
namespace {

namespace alg = prsgd::algorithms;

void make_seeds(const prsgd::fuzz::seed_sink& seed) {
  const std::array<float, 6> w{0.1F, 0.2F, 0.3F, -0.4F, 0.5F, -0.6F};
  const std::array<float, 2> b{1.0F, -1.0F};
  const std::int64_t tracked = 7;
  const std::array<std::uint16_t, 3> halves{0x3c00, 0xbc00, 0x0000};
  alg::st_file model;
  model.metadata = {{"format", "pt"}, {"prsgd.model", "fmnist-mlp"}};
  model.tensors = {
      {"fc.weight", alg::st_dtype::f32, {2, 3}, prsgd::fuzz::raw_bytes(w.data(), sizeof w)},
      {"fc.bias", alg::st_dtype::f32, {2}, prsgd::fuzz::raw_bytes(b.data(), sizeof b)},
      {"bn.num_batches_tracked", alg::st_dtype::i64, {}, prsgd::fuzz::raw_bytes(&tracked, sizeof tracked)}};
  alg::st_file mixed;
  mixed.tensors = {{"half", alg::st_dtype::f16, {3}, prsgd::fuzz::raw_bytes(halves.data(), sizeof halves)},
                   {"mask", alg::st_dtype::boolean, {2, 1}, {1, 0}},
                   {"empty", alg::st_dtype::f64, {0, 4}, {}}};
  const alg::st_file nothing;
  for (const auto& [name, f] : {std::pair{"model", model}, std::pair{"mixed", mixed}, std::pair{"empty", nothing}}) {
    auto encoded = alg::encode_safetensors(f);
    if (!encoded) {
      std::fprintf(stderr, "fuzz seeds: safetensors %s: %s\n", name, encoded.error().context.c_str());
      std::exit(1);
    }
    seed(name, *encoded);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  prsgd::fuzz::write_seeds_if_asked("safetensors", make_seeds);
  return 0;
}
