// SPDX-License-Identifier: Apache-2.0
// Compressed slice payloads: the byte-plane + zstd coder on its own, then through the codec (SHARD_SLICE,
// SHARD_AVERAGE and SHARD_RELAY with `z`), and the capability fields that keep a peer that cannot read them
// out of a job that sends them.
#include "prsgd/actors/payload_compression.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "prsgd/actors/codec.hpp"
#include "prsgd/algorithms/wire_dtype.hpp"

namespace prsgd::actors {
namespace {

// Values like a round's change of a model: small, most within a few powers of two of the largest, so the
// bytes that hold their sign and exponent repeat.
std::vector<float> change_like(std::size_t n, unsigned seed) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> d{-1e-3F, 1e-3F};
  std::vector<float> v(n);
  for (auto& x : v) {
    x = d(rng);
  }
  return v;
}

std::vector<std::byte> bytes_of(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(PayloadCompressionTest, EveryWidthComesBackByteForByte) {
  const auto raw = bytes_of(change_like(10000, 1));
  for (std::size_t width : {4U, 2U}) {
    auto packed = compress_payload(raw, width);
    ASSERT_TRUE(packed.has_value()) << "width " << width;
    EXPECT_LT(packed->size(), raw.size()) << "width " << width;
    auto back = decompress_payload(*packed, width, raw.size());
    ASSERT_TRUE(back) << back.error().message();
    EXPECT_EQ(*back, raw) << "width " << width;
  }
  // One-byte values are never compressed: nothing raw would bound what the frame claims to hold.
  EXPECT_FALSE(compress_payload(raw, 1).has_value());
  EXPECT_FALSE(decompress_payload(*compress_payload(raw, 4), 1, raw.size()));
}

TEST(PayloadCompressionTest, WhatDoesNotShrinkIsLeftAsItIs) {
  std::mt19937 rng{2};
  std::vector<std::byte> noise(4096);
  for (auto& b : noise) {
    b = static_cast<std::byte>(rng());
  }
  EXPECT_FALSE(compress_payload(noise, 4).has_value());
  EXPECT_FALSE(compress_payload({}, 4).has_value());
  EXPECT_FALSE(compress_payload(std::span<const std::byte>{noise}.first(6), 4).has_value()) << "not whole values";
}

TEST(PayloadCompressionTest, AFrameOfTheWrongSizeOrCorruptIsAProtocolError) {
  const auto raw = bytes_of(change_like(4096, 3));
  auto packed = compress_payload(raw, 4);
  ASSERT_TRUE(packed.has_value());
  for (const std::size_t size : {raw.size() - 4, raw.size() + 4, raw.size() * 1000}) {
    auto e = decompress_payload(*packed, 4, size);
    ASSERT_FALSE(e) << size;
    EXPECT_EQ(e.error().code, errc::protocol_error) << size;
  }
  auto cut = decompress_payload(std::span<const std::byte>{*packed}.first(packed->size() / 2), 4, raw.size());
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().code, errc::protocol_error);
  // A frame that claims a far larger payload than arrived is refused from its size alone.
  std::vector<std::byte> tiny(16);
  auto claim = decompress_payload(tiny, 2, std::size_t{1} << 30);
  ASSERT_FALSE(claim);
  EXPECT_EQ(claim.error().code, errc::protocol_error);
  auto garbage = *packed;
  for (std::size_t i = 16; i < garbage.size(); i += 7) {
    garbage[i] ^= std::byte{0x5A};
  }
  auto bad = decompress_payload(garbage, 4, raw.size());
  if (bad) {
    // zstd's frames carry no checksum here and the low planes are raw: a corrupt payload that still has the
    // right size is caught by the receivers' own checks (an owner's finite-value check, the members' x̄
    // checksums), as a corrupt raw payload would be.
    EXPECT_NE(*bad, raw);
  } else {
    EXPECT_EQ(bad.error().code, errc::protocol_error);
  }
}

flat_buffer buffer(std::vector<float> v) { return std::make_shared<const std::vector<float>>(std::move(v)); }

// The header map of an encoded message.
std::map<std::string, msgpack::object> header_of(const multipart& wire, msgpack::object_handle& keep) {
  keep = msgpack::unpack(reinterpret_cast<const char*>(wire[0].data()), wire[0].size());
  return keep.get().as<std::map<std::string, msgpack::object>>();
}

// Re-encodes the header of `wire` with `key` set to `value`.
multipart with_header(const multipart& wire, const std::string& key, std::uint64_t value) {
  msgpack::object_handle keep;
  auto h = header_of(wire, keep);
  msgpack::zone z;
  h[key] = msgpack::object(value, z);
  msgpack::sbuffer out;
  msgpack::pack(out, h);
  multipart m;
  m.push_back(frame::copy(out.data(), out.size()));
  for (std::size_t i = 1; i < wire.size(); ++i) {
    m.push_back(frame::copy(wire[i].data(), wire[i].size()));
  }
  return m;
}

TEST(CodecCompressionTest, SlicesAveragesAndRelaysTravelCompressedAndDecodeBitForBit) {
  using algorithms::wire_dtype;
  for (const auto dtype : {wire_dtype::f32, wire_dtype::bf16, wire_dtype::f16}) {
    // What a sender holds: values its dtype represents exactly.
    const auto model = buffer(algorithms::quantize(change_like(5000, 4), dtype));
    shard_slice_msg slice{3, 33, 7, 1, model, dtype, dtype != wire_dtype::f32};
    shard_average_msg average{3, 33, 7, 1, model, dtype};
    shard_relay_msg relay{5, 7, 1, model, dtype};
    const std::vector<shard_msg> messages{slice, average, relay};
    for (const auto& plain_msg : messages) {
      const auto plain = encode(plain_msg);
      auto packed_msg = plain_msg;
      std::visit(
          [](auto& m) {
            if constexpr (requires { m.compressed; }) {
              m.compressed = true;
            }
          },
          packed_msg);
      const auto packed = encode(packed_msg);
      const std::string what =
          std::string{algorithms::to_string(dtype)} + " type " + std::to_string(packed_msg.index());
      ASSERT_EQ(packed.size(), 2U) << what;
      EXPECT_LT(packed[1].size(), plain[1].size()) << what;
      msgpack::object_handle keep;
      const auto h = header_of(packed, keep);
      ASSERT_TRUE(h.contains("z")) << what;
      EXPECT_EQ(h.at("z").as<std::uint64_t>(), 1U) << what;
      EXPECT_FALSE(header_of(plain, keep).contains("z")) << what;

      auto a = decode_shard(plain);
      auto b = decode_shard(packed);
      ASSERT_TRUE(a) << a.error().message();
      ASSERT_TRUE(b) << b.error().message();
      std::visit(
          [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, shard_slice_msg> || std::is_same_v<T, shard_average_msg> ||
                          std::is_same_v<T, shard_relay_msg>) {
              const auto& y = std::get<T>(*b);
              EXPECT_FALSE(x.compressed) << what;
              EXPECT_TRUE(y.compressed) << what;
              ASSERT_TRUE(x.model && y.model) << what;
              EXPECT_EQ(*x.model, *y.model) << what;
              EXPECT_EQ(*y.model, *model) << what;
            } else {
              ADD_FAILURE() << what << " decoded as another type";
            }
          },
          *a);
    }
  }
}

TEST(CodecCompressionTest, Int8PayloadsTravelAsTheyAre) {
  const auto model = buffer(algorithms::quantize(change_like(5000, 7), algorithms::wire_dtype::int8));
  shard_relay_msg relay{5, 7, 1, model, algorithms::wire_dtype::int8, 6};
  relay.compressed = true;
  const auto wire = encode(shard_msg{relay});
  msgpack::object_handle keep;
  EXPECT_FALSE(header_of(wire, keep).contains("z"));
  EXPECT_EQ(wire[1].size(), algorithms::encoded_size(algorithms::wire_dtype::int8, model->size()));
  auto back = decode_shard(wire);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(*std::get<shard_relay_msg>(*back).model, *model);
  // An int8 payload marked compressed is refused.
  auto marked = decode_shard(with_header(wire, "z", 1));
  ASSERT_FALSE(marked);
  EXPECT_EQ(marked.error().code, errc::protocol_error);
}

TEST(CodecCompressionTest, APayloadThatDoesNotShrinkTravelsAsItIs) {
  std::mt19937 rng{5};
  std::vector<float> noise(1000);
  for (auto& x : noise) {
    const std::uint32_t bits = rng();  // any bit pattern, NaNs included: the codec does not look at values
    std::memcpy(&x, &bits, sizeof x);
  }
  shard_slice_msg slice{3, 33, 7, 1, buffer(noise)};
  slice.compressed = true;
  const auto wire = encode(shard_msg{slice});
  msgpack::object_handle keep;
  EXPECT_FALSE(header_of(wire, keep).contains("z"));
  EXPECT_EQ(wire[1].size(), noise.size() * sizeof(float));
  auto back = decode_shard(wire);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_FALSE(std::get<shard_slice_msg>(*back).compressed);
  const auto& got = *std::get<shard_slice_msg>(*back).model;
  ASSERT_EQ(got.size(), noise.size());
  EXPECT_EQ(std::memcmp(got.data(), noise.data(), noise.size() * sizeof(float)), 0);
}

TEST(CodecCompressionTest, AnUnknownOrBrokenCompressionIsAProtocolError) {
  shard_average_msg average{3, 33, 7, 1, buffer(change_like(2000, 6))};
  average.compressed = true;
  const auto wire = encode(shard_msg{average});
  ASSERT_TRUE(decode_shard(wire));

  auto unknown = decode_shard(with_header(wire, "z", 2));
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, errc::protocol_error);
  EXPECT_NE(unknown.error().message().find("compression 2"), std::string::npos) << unknown.error().message();

  // A compressed frame read as raw floats: its size disagrees with the header.
  auto unmarked = decode_shard(with_header(wire, "z", 0));
  ASSERT_FALSE(unmarked);
  EXPECT_EQ(unmarked.error().code, errc::protocol_error);

  // A frame cut short.
  multipart cut;
  cut.push_back(frame::copy(wire[0].data(), wire[0].size()));
  cut.push_back(frame::copy(wire[1].data(), wire[1].size() / 2));
  auto short_frame = decode_shard(cut);
  ASSERT_FALSE(short_frame);
  EXPECT_EQ(short_frame.error().code, errc::protocol_error);
}

// Encodes `m` wrapped as `Sent`, decodes it with `decode` and returns it (a default one, and a failure, if it
// does not come back as an M).
template <class Sent, class M, class Decode>
M round_trip(const M& m, Decode decode) {
  auto back = decode(encode(Sent{m}), codec_limits{});
  if (!back || !std::holds_alternative<M>(*back)) {
    ADD_FAILURE() << (back ? std::string{"another type"} : back.error().message());
    return M{};
  }
  return std::get<M>(*back);
}

TEST(CodecCompressionTest, JoinWelcomeHelloAndSetupCarryTheCapabilityAndTheSetting) {
  const auto to_averager_back = [](const multipart& w, const codec_limits& l) { return decode_to_averager(w, l); };
  const auto to_worker_back = [](const multipart& w, const codec_limits& l) { return decode_to_worker(w, l); };
  const auto shard_back = [](const multipart& w, const codec_limits& l) { return decode_shard(w, l); };

  join_msg j;
  EXPECT_FALSE(round_trip<to_averager>(j, to_averager_back).reads_compressed);
  j.reads_compressed = true;
  EXPECT_TRUE(round_trip<to_averager>(j, to_averager_back).reads_compressed);

  welcome_msg w{1, 2, 3, 4, 5, training_mode::restarted_sgd, 99, std::chrono::milliseconds(250)};
  w.owners = {"tcp://10.0.0.2:7000"};
  EXPECT_FALSE(round_trip<to_worker>(w, to_worker_back).compress);
  w.compress = true;
  EXPECT_TRUE(round_trip<to_worker>(w, to_worker_back).compress);

  shard_hello_msg hello{1, 2, 3, 0, 2, "tcp://10.0.0.2:7001", false};
  EXPECT_FALSE(round_trip<shard_msg>(hello, shard_back).reads_compressed);
  hello.reads_compressed = true;
  EXPECT_TRUE(round_trip<shard_msg>(hello, shard_back).reads_compressed);

  shard_setup_msg setup{1, 2, 3, 0, 2, 0, 4, std::chrono::milliseconds(250), buffer({1, 2})};
  EXPECT_FALSE(round_trip<shard_msg>(setup, shard_back).compress);
  setup.compress = true;
  EXPECT_TRUE(round_trip<shard_msg>(setup, shard_back).compress);
}

}  // namespace
}  // namespace prsgd::actors
