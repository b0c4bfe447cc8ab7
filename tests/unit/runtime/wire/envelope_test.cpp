// SPDX-License-Identifier: Apache-2.0
#include "prsgd/runtime/envelope.hpp"

#include <cstring>
#include <random>

#include <gtest/gtest.h>
#include <msgpack.hpp>

namespace prsgd::wire {
namespace {

std::vector<std::byte> bytes_of(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// Returns a valid header of type `t` with every field that type needs.
header valid_header(message_type t) {
  header h;
  h.type = t;
  h.from = {"node-1", 7};
  h.correlation_id = 42;
  switch (t) {
    case message_type::tell:
    case message_type::ask:
      h.to = {"node-2", 9};
      h.method = "add";
      h.args = bytes_of("\x91\x05");
      break;
    case message_type::reply: h.args = bytes_of("\x05"); break;
    case message_type::error:
      h.error_code = errc::not_found;
      h.error_context = "no method 'mul'";
      break;
    case message_type::spawn:
      h.type_name = "counter";
      h.name = "c1";
      h.node = "node-2";
      h.args = bytes_of("\x91\x00");
      break;
    case message_type::monitor:
    case message_type::demonitor:
    case message_type::down:
      h.to = {"node-2", 3};
      h.error_code = t == message_type::down ? errc::actor_dead : errc::none;
      break;
    case message_type::heartbeat:
    case message_type::node_down:
    case message_type::leave:
      h.node = "node-3";
      h.incarnation = 5;
      break;
    case message_type::register_node:
      h.node = "node-3";
      h.endpoint = "tcp://127.0.0.1:4000";
      h.incarnation = 2;
      break;
    case message_type::register_name: h.name = "averager"; break;
    case message_type::lookup: h.name = "averager"; break;
  }
  return h;
}

void expect_same(const header& a, const header& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.from, b.from);
  EXPECT_EQ(a.to, b.to);
  EXPECT_EQ(a.to_name, b.to_name);
  EXPECT_EQ(a.correlation_id, b.correlation_id);
  EXPECT_EQ(a.method, b.method);
  EXPECT_EQ(a.type_name, b.type_name);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.node, b.node);
  EXPECT_EQ(a.endpoint, b.endpoint);
  EXPECT_EQ(a.incarnation, b.incarnation);
  EXPECT_EQ(a.error_code, b.error_code);
  EXPECT_EQ(a.error_context, b.error_context);
  EXPECT_EQ(a.args, b.args);
}

// Packs a map of (key, packing function) pairs, to build hand-crafted headers.
std::vector<buffer> raw_header(const std::function<void(msgpack::packer<msgpack::sbuffer>&)>& body) {
  msgpack::sbuffer sb;
  msgpack::packer<msgpack::sbuffer> pk(sb);
  body(pk);
  return {frame::copy(sb.data(), sb.size())};
}

TEST(EnvelopeTest, RoundTripsEveryMessageType) {
  for (std::uint8_t t = 1; t <= max_message_type; ++t) {
    envelope env;
    env.hdr = valid_header(static_cast<message_type>(t));
    auto frames = encode(env);
    ASSERT_TRUE(frames) << to_string(env.hdr.type) << ": " << frames.error().message();
    ASSERT_EQ(frames->size(), 1U);
    auto back = decode(*frames);
    ASSERT_TRUE(back) << to_string(env.hdr.type) << ": " << back.error().message();
    expect_same(env.hdr, back->hdr);
    EXPECT_TRUE(back->payloads.empty());
  }
}

TEST(EnvelopeTest, RoundTripsPayloadsWithoutCopying) {
  auto model = std::make_shared<const std::vector<float>>(std::vector<float>{1.0F, 2.5F, -3.0F, 4.0F, 5.0F, 6.0F});
  envelope env;
  env.hdr = valid_header(message_type::tell);
  payload p;
  p.data = frame::share(model);
  p.type = dtype::f32;
  p.shape = {2, 3};
  p.crc32 = crc32(p.data.bytes());
  env.payloads.push_back(p);
  env.payloads.push_back(payload{frame::copy("raw"), dtype::bytes, {}, std::nullopt});
  auto frames = encode(env);
  ASSERT_TRUE(frames) << frames.error().message();
  ASSERT_EQ(frames->size(), 3U);
  EXPECT_EQ((*frames)[1].data(), reinterpret_cast<const std::byte*>(model->data()));  // zero copy
  auto back = decode(*frames);
  ASSERT_TRUE(back) << back.error().message();
  ASSERT_EQ(back->payloads.size(), 2U);
  const payload& q = back->payloads[0];
  EXPECT_EQ(q.type, dtype::f32);
  EXPECT_EQ(q.shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(q.crc32, p.crc32);
  EXPECT_EQ(q.data.data(), reinterpret_cast<const std::byte*>(model->data()));
  ASSERT_EQ(q.data.size(), 6 * sizeof(float));
  float third = 0;
  std::memcpy(&third, q.data.data() + 2 * sizeof(float), sizeof(float));
  EXPECT_EQ(third, -3.0F);
  EXPECT_EQ(back->payloads[1].data.size(), 3U);
}

TEST(EnvelopeTest, AddressesByName) {
  envelope env;
  env.hdr = valid_header(message_type::ask);
  env.hdr.to = {};
  env.hdr.to_name = "averager";
  auto frames = encode(env);
  ASSERT_TRUE(frames) << frames.error().message();
  auto back = decode(*frames);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->hdr.to_name, "averager");
  EXPECT_FALSE(back->hdr.to.valid());
}

TEST(EnvelopeTest, EncoderRejectsMissingRequiredFields) {
  header h = valid_header(message_type::ask);
  h.correlation_id = 0;
  EXPECT_EQ(encode(envelope{h, {}}).error().code, errc::protocol_error);
  h = valid_header(message_type::tell);
  h.method.clear();
  EXPECT_EQ(encode(envelope{h, {}}).error().code, errc::protocol_error);
  h = valid_header(message_type::error);
  h.error_code = errc::none;
  EXPECT_EQ(encode(envelope{h, {}}).error().code, errc::protocol_error);
  h = valid_header(message_type::tell);
  h.to_name = "both";
  EXPECT_EQ(encode(envelope{h, {}}).error().code, errc::protocol_error);
  h = valid_header(message_type::tell);
  h.method = std::string(257, 'm');
  EXPECT_EQ(encode(envelope{h, {}}).error().code, errc::protocol_error);
  h = valid_header(message_type::tell);
  h.method = "bad\nname";
  EXPECT_EQ(encode(envelope{h, {}}).error().code, errc::protocol_error);
  h = valid_header(message_type::tell);
  h.args.assign(70 * 1024, std::byte{1});
  EXPECT_EQ(encode(envelope{h, {}}).error().code, errc::too_large);
}

TEST(EnvelopeTest, RejectsShapeThatDisagreesWithSize) {
  envelope env;
  env.hdr = valid_header(message_type::tell);
  env.payloads.push_back(payload{frame::copy("12345678"), dtype::f32, {3}, std::nullopt});
  EXPECT_EQ(encode(env).error().code, errc::protocol_error);
  env.payloads[0].shape = {};
  env.payloads[0].data = frame::copy("123");
  EXPECT_EQ(encode(env).error().code, errc::protocol_error);  // not a multiple of 4
}

TEST(EnvelopeTest, RejectsPayloadSizesThatDisagreeWithTheHeader) {
  envelope env;
  env.hdr = valid_header(message_type::tell);
  env.payloads.push_back(payload{frame::copy("abcd"), dtype::bytes, {}, std::nullopt});
  auto frames = encode(env);
  ASSERT_TRUE(frames);
  std::vector<buffer> bad = *frames;
  bad[1] = frame::copy("abc");
  EXPECT_EQ(decode(bad).error().code, errc::protocol_error);
  bad[1] = frame::copy("abcde");
  EXPECT_EQ(decode(bad).error().code, errc::protocol_error);
  bad = {(*frames)[0]};  // frame missing
  EXPECT_EQ(decode(bad).error().code, errc::protocol_error);
  bad = *frames;
  bad.push_back(frame::copy("extra"));  // frame not declared
  EXPECT_EQ(decode(bad).error().code, errc::protocol_error);
}

TEST(EnvelopeTest, DetectsChecksumMismatch) {
  envelope env;
  env.hdr = valid_header(message_type::tell);
  payload p{frame::copy("abcd"), dtype::bytes, {}, std::nullopt};
  p.crc32 = crc32(p.data.bytes());
  env.payloads.push_back(p);
  auto frames = encode(env);
  ASSERT_TRUE(frames);
  (*frames)[1] = frame::copy("abce");
  EXPECT_EQ(decode(*frames).error().code, errc::checksum_mismatch);
  limits lax;
  lax.verify_checksums = false;
  EXPECT_TRUE(decode(*frames, lax));
}

TEST(EnvelopeTest, KnowsTheZlibCrc32) {
  const std::string text = "123456789";
  EXPECT_EQ(crc32(std::as_bytes(std::span<const char>(text.data(), text.size()))), 0xCBF43926U);
}

TEST(EnvelopeTest, RejectsWrongVersion) {
  auto frames = raw_header([](auto& pk) {
    pk.pack_map(4);
    pk.pack(std::string("v"));
    pk.pack(2);
    pk.pack(std::string("t"));
    pk.pack(3);
    pk.pack(std::string("c"));
    pk.pack(1);
    pk.pack(std::string("a"));
    pk.pack_bin(0);
  });
  auto r = decode(frames);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, errc::protocol_error);
  EXPECT_NE(r.error().context.find("version"), std::string::npos);
}

TEST(EnvelopeTest, RejectsMissingVersionUnknownTypeAndWrongFieldTypes) {
  // No version.
  auto r = decode(raw_header([](auto& pk) {
    pk.pack_map(2);
    pk.pack(std::string("t"));
    pk.pack(3);
    pk.pack(std::string("c"));
    pk.pack(1);
  }));
  EXPECT_EQ(r.error().code, errc::protocol_error);
  // Unknown type.
  r = decode(raw_header([](auto& pk) {
    pk.pack_map(2);
    pk.pack(std::string("v"));
    pk.pack(1);
    pk.pack(std::string("t"));
    pk.pack(99);
  }));
  EXPECT_EQ(r.error().code, errc::protocol_error);
  // Version as a string, correlation id negative, method as an int, from as a map, args as a string.
  const std::vector<std::function<void(msgpack::packer<msgpack::sbuffer>&)>> wrong = {
      [](auto& pk) {
        pk.pack(std::string("v"));
        pk.pack(std::string("1"));
      },
      [](auto& pk) {
        pk.pack(std::string("c"));
        pk.pack(-1);
      },
      [](auto& pk) {
        pk.pack(std::string("m"));
        pk.pack(5);
      },
      [](auto& pk) {
        pk.pack(std::string("f"));
        pk.pack_map(0);
      },
      [](auto& pk) {
        pk.pack(std::string("f"));
        pk.pack_array(2);
        pk.pack(1);
        pk.pack(1);
      },
      [](auto& pk) {
        pk.pack(std::string("a"));
        pk.pack(std::string("x"));
      },
      [](auto& pk) {
        pk.pack(std::string("p"));
        pk.pack(3);
      },
      [](auto& pk) {
        pk.pack(std::string("p"));
        pk.pack_array(1);
        pk.pack(3);
      },
      [](auto& pk) {
        pk.pack(std::string("ec"));
        pk.pack(250);
      },
      [](auto& pk) {
        pk.pack(std::string("t"));
        pk.pack(1.5);
      },
  };
  for (std::size_t i = 0; i < wrong.size(); ++i) {
    r = decode(raw_header([&](auto& pk) {
      pk.pack_map(3);
      pk.pack(std::string("t"));
      pk.pack(2);
      pk.pack(std::string("v"));
      pk.pack(1);
      wrong[i](pk);
    }));
    ASSERT_FALSE(r) << "case " << i;
    EXPECT_EQ(r.error().code, errc::protocol_error) << "case " << i << ": " << r.error().message();
  }
  // Not a map at all.
  r = decode(raw_header([](auto& pk) { pk.pack(std::string("hello")); }));
  EXPECT_EQ(r.error().code, errc::protocol_error);
}

TEST(EnvelopeTest, RejectsHugeDeclaredCountsWithoutAllocating) {
  // array32 with 2^32-1 elements, map32 with 2^32-1 pairs, str32/bin32 of 4 GiB: only the prefix is present.
  for (const std::string& prefix : {std::string("\xdd\xff\xff\xff\xff", 5), std::string("\xdf\xff\xff\xff\xff", 5),
                                    std::string("\xdb\xff\xff\xff\xff", 5), std::string("\xc6\xff\xff\xff\xff", 5),
                                    std::string("\x81\xa1p\xdd\x7f\xff\xff\xff", 8)}) {
    const std::vector<buffer> frames{frame::copy(prefix)};
    auto r = decode(frames);
    ASSERT_FALSE(r);
    EXPECT_TRUE(r.error().code == errc::decode_failed || r.error().code == errc::protocol_error) << r.error().message();
  }
  // A well-formed header that declares more payloads than allowed.
  auto r = decode(raw_header([](auto& pk) {
    pk.pack_map(3);
    pk.pack(std::string("v"));
    pk.pack(1);
    pk.pack(std::string("t"));
    pk.pack(3);
    pk.pack(std::string("p"));
    pk.pack_array(65);
    for (int i = 0; i < 65; ++i) {
      pk.pack_array(4);
      pk.pack(0);
      pk.pack(0);
      pk.pack_array(0);
      pk.pack_nil();
    }
  }));
  EXPECT_FALSE(r);
}

TEST(EnvelopeTest, RejectsOversizedAndEmptyFrames) {
  limits lim;
  EXPECT_EQ(decode(std::vector<buffer>{}).error().code, errc::protocol_error);
  EXPECT_EQ(decode(std::vector<buffer>{buffer{}}).error().code, errc::protocol_error);
  const std::vector<buffer> big{frame::take(std::vector<std::byte>(lim.max_header_bytes + 1))};
  EXPECT_EQ(decode(big).error().code, errc::too_large);
  std::vector<buffer> many(lim.max_payloads + 2, frame::copy("x"));
  EXPECT_EQ(decode(many).error().code, errc::too_large);
  envelope env;
  env.hdr = valid_header(message_type::tell);
  env.payloads.push_back(payload{frame::copy("0123456789"), dtype::bytes, {}, std::nullopt});
  auto frames = encode(env);
  ASSERT_TRUE(frames);
  limits small;
  small.max_payload_bytes = 4;
  EXPECT_EQ(decode(*frames, small).error().code, errc::too_large);
  small = {};
  small.max_total_bytes = 16;
  EXPECT_EQ(decode(*frames, small).error().code, errc::too_large);
}

TEST(EnvelopeTest, RejectsTrailingBytesAndEveryTruncation) {
  envelope env;
  env.hdr = valid_header(message_type::spawn);
  auto frames = encode(env);
  ASSERT_TRUE(frames);
  const auto full = (*frames)[0].bytes();
  for (std::size_t n = 0; n < full.size(); ++n) {
    const std::vector<buffer> cut{frame::copy(full.data(), n)};
    EXPECT_FALSE(decode(cut)) << "truncated to " << n;
  }
  std::vector<std::byte> longer(full.begin(), full.end());
  longer.push_back(std::byte{0xc0});
  EXPECT_EQ(decode(std::vector<buffer>{frame::take(longer)}).error().code, errc::protocol_error);
}

// Decodes random and mutated inputs; every one must give a value or an error, never a crash.
TEST(EnvelopeTest, SurvivesRandomAndMutatedInput) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int iterations = 4'000;  // exceptions are slow under sanitizers
#else
  constexpr int iterations = 100'000;
#endif
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<std::vector<std::byte>> seeds;
  for (std::uint8_t t = 1; t <= max_message_type; ++t) {
    envelope env;
    env.hdr = valid_header(static_cast<message_type>(t));
    env.payloads.push_back(payload{frame::copy("abcdefgh"), dtype::f32, {2}, std::nullopt});
    auto frames = encode(env);
    ASSERT_TRUE(frames);
    seeds.emplace_back((*frames)[0].bytes().begin(), (*frames)[0].bytes().end());
  }
  const buffer body = frame::copy("abcdefgh");
  int accepted = 0;
  for (int i = 0; i < iterations; ++i) {
    std::vector<std::byte> bytes;
    if (i % 4 == 0) {
      bytes.resize(rng() % 64);
      for (auto& b : bytes) {
        b = static_cast<std::byte>(rng());
      }
    } else {
      bytes = seeds[rng() % seeds.size()];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !bytes.empty(); ++e) {
        const std::size_t at = rng() % bytes.size();
        switch (rng() % 4) {
          case 0: bytes[at] = static_cast<std::byte>(rng()); break;
          case 1: bytes[at] ^= static_cast<std::byte>(1U << (rng() % 8)); break;
          case 2: bytes.resize(at); break;
          default: bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::byte>(rng())); break;
        }
      }
    }
    std::vector<buffer> frames;
    frames.reserve(2);
    frames.emplace_back(frame::take(std::move(bytes)));
    if (rng() % 2 == 0) {
      frames.emplace_back(body);
    }
    auto r = decode(frames);
    if (r) {
      ++accepted;
      // Whatever is accepted must satisfy the invariants the decoder promises.
      EXPECT_TRUE(validate(r->hdr));
      ASSERT_EQ(r->payloads.size(), frames.size() - 1);
    } else {
      EXPECT_NE(r.error().code, errc::none);
    }
  }
  EXPECT_LT(accepted, iterations);
}

}  // namespace
}  // namespace prsgd::wire
