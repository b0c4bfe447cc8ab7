// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/wav.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

namespace prsgd::algorithms {
namespace {

constexpr std::uint16_t format_pcm = 1;
constexpr std::uint16_t format_extensible = 0xFFFE;

std::uint32_t le32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

std::uint16_t le16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }

bool tag_is(const std::uint8_t* p, const char* tag) { return std::memcmp(p, tag, 4) == 0; }

unexpected bad(std::string_view name, const std::string& what) {
  return fail(errc::decode_failed, std::string{name} + ": " + what);
}

struct fmt_chunk {
  std::uint16_t tag = 0;
  std::uint16_t channels = 0;
  std::uint32_t sample_rate = 0;
  std::uint16_t block_align = 0;
  std::uint16_t bits = 0;
};

void put16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v & 0xFF));
  out.push_back(static_cast<std::uint8_t>(v >> 8));
}

void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<std::uint8_t>((v >> (8 * i)) & 0xFF));
  }
}

void put_tag(std::vector<std::uint8_t>& out, const char* tag) {
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<std::uint8_t>(tag[i]));
  }
}

}  // namespace

expected<std::vector<float>> decode_wav(std::span<const std::uint8_t> bytes, std::string_view name,
                                        const wav_format& required) {
  const int rb = required.bits_per_sample;
  if ((rb != 8 && rb != 16 && rb != 24 && rb != 32) || required.channels < 1 || required.sample_rate < 1) {
    return fail(errc::invalid_argument, std::string{name} + ": unsupported required WAV format");
  }
  if (bytes.size() < 12) {
    return bad(name, "not a WAV file (" + std::to_string(bytes.size()) + " bytes, too short for a RIFF header)");
  }
  if (!tag_is(bytes.data(), "RIFF")) {
    return bad(name, "not a WAV file (no RIFF header)");
  }
  if (!tag_is(bytes.data() + 8, "WAVE")) {
    return bad(name, "RIFF file is not WAVE");
  }
  std::optional<fmt_chunk> fmt;
  std::optional<std::span<const std::uint8_t>> data;
  std::size_t pos = 12;
  while (pos + 8 <= bytes.size()) {
    const std::uint8_t* head = bytes.data() + pos;
    const std::size_t size = le32(head + 4);
    const std::size_t body = pos + 8;
    const std::size_t remaining = bytes.size() - body;
    if (tag_is(head, "fmt ")) {
      if (size < 16 || size > remaining) {
        return bad(name, "truncated or malformed fmt chunk (" + std::to_string(size) + " bytes)");
      }
      const std::uint8_t* f = bytes.data() + body;
      fmt_chunk c{le16(f), le16(f + 2), le32(f + 4), le16(f + 12), le16(f + 14)};
      if (c.tag == format_extensible) {
        // WAVE_FORMAT_EXTENSIBLE keeps the real format tag in the first two bytes of its sub-format GUID.
        if (size < 40) {
          return bad(name, "truncated WAVE_FORMAT_EXTENSIBLE fmt chunk");
        }
        c.tag = le16(f + 24);
      }
      fmt = c;
    } else if (tag_is(head, "data")) {
      if (size > remaining) {
        return bad(name, "truncated: data chunk declares " + std::to_string(size) + " bytes but only " +
                             std::to_string(remaining) + " remain");
      }
      data = bytes.subspan(body, size);
      if (fmt) {
        break;  // everything after the samples (LIST, id3, ...) is irrelevant
      }
    } else if (size > remaining) {
      return bad(name, "truncated chunk '" + std::string(reinterpret_cast<const char*>(head), 4) + "'");
    }
    pos = body + size + (size & 1U);  // chunks are padded to an even size
  }
  if (!fmt) {
    return bad(name, "no fmt chunk (truncated or not a WAV file)");
  }
  if (!data) {
    return bad(name, "no data chunk (truncated?)");
  }
  if (fmt->tag != format_pcm) {
    return bad(name, "unsupported encoding (format tag " + std::to_string(fmt->tag) + "), only integer PCM");
  }
  if (fmt->sample_rate != static_cast<std::uint32_t>(required.sample_rate)) {
    return bad(name, "sample rate " + std::to_string(fmt->sample_rate) + " Hz, expected " +
                         std::to_string(required.sample_rate) + " Hz");
  }
  if (fmt->channels != required.channels) {
    return bad(name, std::to_string(fmt->channels) + " channels, expected " + std::to_string(required.channels));
  }
  if (fmt->bits != rb) {
    return bad(name, std::to_string(fmt->bits) + "-bit samples, expected " + std::to_string(rb) + "-bit");
  }
  const std::size_t sample_bytes = static_cast<std::size_t>(rb) / 8;
  const std::size_t frame_bytes = sample_bytes * static_cast<std::size_t>(required.channels);
  if (fmt->block_align != frame_bytes) {
    return bad(name, "block align " + std::to_string(fmt->block_align) + " does not match " +
                         std::to_string(frame_bytes) + " bytes per frame");
  }
  if (data->size() % frame_bytes != 0) {
    return bad(name,
               "truncated: data chunk of " + std::to_string(data->size()) + " bytes is not a whole number of frames");
  }
  const std::size_t count = data->size() / sample_bytes;
  std::vector<float> out(count);
  const std::uint8_t* p = data->data();
  const double scale = 1.0 / std::ldexp(1.0, rb - 1);
  for (std::size_t i = 0; i < count; ++i, p += sample_bytes) {
    std::int32_t v = 0;
    switch (rb) {
      case 8: v = static_cast<std::int32_t>(p[0]) - 128; break;
      case 16: v = static_cast<std::int16_t>(le16(p)); break;
      case 24: {
        const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
                                (static_cast<std::uint32_t>(p[2]) << 16);
        v = static_cast<std::int32_t>(u << 8) >> 8;  // sign-extends the 24-bit value
        break;
      }
      default: v = static_cast<std::int32_t>(le32(p)); break;
    }
    out[i] = static_cast<float>(v * scale);
  }
  return out;
}

expected<std::vector<float>> read_wav(const std::filesystem::path& file, const wav_format& required) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return fail(errc::io_error, file.string() + ": cannot open");
  }
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    return fail(errc::io_error, file.string() + ": read failed");
  }
  return decode_wav(bytes, file.string(), required);
}

std::vector<std::uint8_t> encode_wav(std::span<const float> samples, int sample_rate) {
  const auto data_bytes = static_cast<std::uint32_t>(samples.size() * 2);
  std::vector<std::uint8_t> out;
  out.reserve(44 + data_bytes);
  put_tag(out, "RIFF");
  put32(out, 36 + data_bytes);
  put_tag(out, "WAVE");
  put_tag(out, "fmt ");
  put32(out, 16);
  put16(out, format_pcm);
  put16(out, 1);
  put32(out, static_cast<std::uint32_t>(sample_rate));
  put32(out, static_cast<std::uint32_t>(sample_rate) * 2);
  put16(out, 2);
  put16(out, 16);
  put_tag(out, "data");
  put32(out, data_bytes);
  for (const float s : samples) {
    const float c = std::clamp(s, -1.0f, 1.0f);
    const auto v = static_cast<std::int16_t>(std::lround(std::clamp(c * 32768.0f, -32768.0f, 32767.0f)));
    put16(out, static_cast<std::uint16_t>(v));
  }
  return out;
}

expected<void> write_wav(const std::filesystem::path& file, std::span<const float> samples, int sample_rate) {
  const std::vector<std::uint8_t> bytes = encode_wav(samples, sample_rate);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) {
    return fail(errc::io_error, file.string() + ": cannot create");
  }
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    return fail(errc::io_error, file.string() + ": write failed");
  }
  return {};
}

}  // namespace prsgd::algorithms
