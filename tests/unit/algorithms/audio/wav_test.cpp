// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/wav.hpp"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "files.hpp"

namespace prsgd::algorithms {
namespace {

void put16(std::vector<std::uint8_t>& b, std::uint32_t v) {
  b.push_back(static_cast<std::uint8_t>(v & 0xFF));
  b.push_back(static_cast<std::uint8_t>((v >> 8) & 0xFF));
}
void put32(std::vector<std::uint8_t>& b, std::uint32_t v) {
  put16(b, v & 0xFFFF);
  put16(b, v >> 16);
}
void tag(std::vector<std::uint8_t>& b, const char* t) { b.insert(b.end(), t, t + 4); }

struct spec {
  std::uint16_t format = 1;
  std::uint16_t channels = 1;
  std::uint32_t rate = 16000;
  std::uint16_t bits = 16;
  std::vector<std::uint8_t> data;
  bool list_chunk = false;  // an odd-sized LIST chunk before fmt, which readers must skip
};

// Builds a WAV image by hand so the reader is tested against bytes it did not write itself.
std::vector<std::uint8_t> build(const spec& s) {
  std::vector<std::uint8_t> body;
  tag(body, "WAVE");
  if (s.list_chunk) {
    tag(body, "LIST");
    put32(body, 5);
    body.insert(body.end(), {'I', 'N', 'F', 'O', 'x', 0});  // 5 bytes + 1 pad byte
  }
  tag(body, "fmt ");
  put32(body, 16);
  put16(body, s.format);
  put16(body, s.channels);
  put32(body, s.rate);
  put32(body, s.rate * s.channels * s.bits / 8);
  put16(body, static_cast<std::uint32_t>(s.channels * s.bits / 8));
  put16(body, s.bits);
  tag(body, "data");
  put32(body, static_cast<std::uint32_t>(s.data.size()));
  body.insert(body.end(), s.data.begin(), s.data.end());
  std::vector<std::uint8_t> out;
  tag(out, "RIFF");
  put32(out, static_cast<std::uint32_t>(body.size()));
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<std::uint8_t> pcm16(std::initializer_list<int> values) {
  std::vector<std::uint8_t> b;
  for (const int v : values) {
    put16(b, static_cast<std::uint16_t>(static_cast<std::int16_t>(v)));
  }
  return b;
}

class WavTest : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    const auto p = dir_.path() / name;
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  // Reads `name` and expects decode_failed whose context names the file and contains `what`.
  void expect_decode_error(const std::string& name, const std::vector<std::uint8_t>& bytes, const std::string& what) {
    const auto p = write(name, bytes);
    const auto r = read_wav(p);
    ASSERT_FALSE(r.has_value()) << name;
    EXPECT_EQ(r.error().code, errc::decode_failed) << r.error().message();
    EXPECT_NE(r.error().context.find(p.string()), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().context.find(what), std::string::npos) << r.error().message();
  }
  prsgd::test::scratch_dir dir_{"prsgd-audio"};
};

TEST_F(WavTest, RoundTripsSixteenBitMono) {
  std::vector<float> in(1000);
  for (std::size_t i = 0; i < in.size(); ++i) {
    in[i] = 0.9f * static_cast<float>(std::sin(0.05 * static_cast<double>(i)));
  }
  const auto p = dir_.path() / "sine.wav";
  ASSERT_TRUE(write_wav(p, in, 16000).has_value());
  EXPECT_EQ(std::filesystem::file_size(p), 44U + 2000U);
  const auto out = read_wav(p);
  ASSERT_TRUE(out.has_value()) << out.error().message();
  ASSERT_EQ(out->size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_NEAR((*out)[i], in[i], 1.0f / 32768.0f) << i;
  }
}

TEST_F(WavTest, DecodesHandBuiltFileWithExtraChunk) {
  spec s;
  s.data = pcm16({0, 16384, -32768, 32767});
  s.list_chunk = true;
  const auto out = read_wav(write("list.wav", build(s)));
  ASSERT_TRUE(out.has_value()) << out.error().message();
  ASSERT_EQ(out->size(), 4U);
  EXPECT_FLOAT_EQ((*out)[0], 0.0f);
  EXPECT_FLOAT_EQ((*out)[1], 0.5f);
  EXPECT_FLOAT_EQ((*out)[2], -1.0f);
  EXPECT_FLOAT_EQ((*out)[3], 32767.0f / 32768.0f);
}

TEST_F(WavTest, DecodesTwentyFourBitWhenRequired) {
  spec s;
  s.bits = 24;
  s.data = {0x00, 0x00, 0x80, 0x00, 0x00, 0x40};  // -2^23, +2^22
  const auto out = read_wav(write("pcm24.wav", build(s)), wav_format{16000, 1, 24});
  ASSERT_TRUE(out.has_value()) << out.error().message();
  ASSERT_EQ(out->size(), 2U);
  EXPECT_FLOAT_EQ((*out)[0], -1.0f);
  EXPECT_FLOAT_EQ((*out)[1], 0.5f);
}

TEST_F(WavTest, RejectsWrongSampleRate) {
  spec s;
  s.rate = 22050;
  s.data = pcm16({1, 2});
  expect_decode_error("rate.wav", build(s), "22050");
}

TEST_F(WavTest, RejectsWrongChannelCount) {
  spec s;
  s.channels = 2;
  s.data = pcm16({1, 2, 3, 4});
  expect_decode_error("stereo.wav", build(s), "2 channels");
}

TEST_F(WavTest, RejectsWrongBitDepth) {
  spec s;
  s.bits = 8;
  s.data = {128, 129};
  expect_decode_error("eight.wav", build(s), "8-bit");
}

TEST_F(WavTest, RejectsNonPcmEncoding) {
  spec s;
  s.format = 3;  // IEEE float
  s.bits = 32;
  s.data.assign(8, 0);
  expect_decode_error("float.wav", build(s), "format tag 3");
}

TEST_F(WavTest, RejectsTruncatedData) {
  spec s;
  s.data = pcm16({1, 2, 3, 4, 5, 6});
  auto bytes = build(s);
  bytes.resize(bytes.size() - 5);
  expect_decode_error("truncated.wav", bytes, "truncated");
}

TEST_F(WavTest, RejectsTruncatedHeader) {
  spec s;
  s.data = pcm16({1, 2});
  auto bytes = build(s);
  bytes.resize(30);  // cuts the fmt chunk
  expect_decode_error("header.wav", bytes, "fmt");
}

TEST_F(WavTest, RejectsHalfFrame) {
  spec s;
  s.data = {1, 2, 3};  // one and a half 16-bit samples
  expect_decode_error("odd.wav", build(s), "whole number of frames");
}

TEST_F(WavTest, RejectsNonWavFiles) {
  const std::string text = "this is not a wav file at all";
  expect_decode_error("text.wav", {text.begin(), text.end()}, "not a WAV file");
  expect_decode_error("tiny.wav", {'R', 'I'}, "not a WAV file");
  std::vector<std::uint8_t> avi;
  tag(avi, "RIFF");
  put32(avi, 4);
  tag(avi, "AVI ");
  expect_decode_error("movie.wav", avi, "not WAVE");
}

TEST_F(WavTest, MissingFileIsIoErrorNamingIt) {
  const auto p = dir_.path() / "absent.wav";
  const auto r = read_wav(p);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errc::io_error);
  EXPECT_NE(r.error().context.find("absent.wav"), std::string::npos);
}

TEST_F(WavTest, RejectsUnsupportedRequiredFormat) {
  spec s;
  s.data = pcm16({1});
  const auto r = decode_wav(build(s), "x.wav", wav_format{16000, 1, 12});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, errc::invalid_argument);
}

}  // namespace
}  // namespace prsgd::algorithms
