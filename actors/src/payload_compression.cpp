// SPDX-License-Identifier: Apache-2.0
// Payload compression: byte planes + zstd (payload_compression.hpp).
#include "prsgd/actors/payload_compression.hpp"

#include <zstd.h>

#include <cstdint>
#include <cstring>
#include <string>


namespace prsgd::actors {
namespace {

// zstd's fastest level that still entropy-codes the literals (what compresses the top plane).
constexpr int compression_level = 1;

// Regroups n values of `width` bytes into `width` planes of n bytes each (and back). Fixed widths let the
// compiler unroll the inner loop.
template <std::size_t W>
void to_planes(const std::byte* in, std::byte* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t b = 0; b < W; ++b) {
      out[b * n + i] = in[i * W + b];
    }
  }
}

template <std::size_t W>
void from_planes(const std::byte* in, std::byte* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t b = 0; b < W; ++b) {
      out[i * W + b] = in[b * n + i];
    }
  }
}

void regroup(const std::byte* in, std::byte* out, std::size_t bytes, std::size_t width, bool to) {
  const std::size_t n = bytes / width;
  switch (width) {
    case 4:
      to ? to_planes<4>(in, out, n) : from_planes<4>(in, out, n);
      return;
    case 2:
      to ? to_planes<2>(in, out, n) : from_planes<2>(in, out, n);
      return;
    default:
      std::memcpy(out, in, bytes);
      return;
  }
}

// One compression context per thread: creating one costs more than compressing a small slice.
ZSTD_CCtx* compression_context() {
  struct holder {
    ZSTD_CCtx* ctx = ZSTD_createCCtx();
    ~holder() { ZSTD_freeCCtx(ctx); }
  };
  thread_local holder h;
  return h.ctx;
}

ZSTD_DCtx* decompression_context() {
  struct holder {
    ZSTD_DCtx* ctx = ZSTD_createDCtx();
    ~holder() { ZSTD_freeDCtx(ctx); }
  };
  thread_local holder h;
  return h.ctx;
}

}  // namespace

std::optional<std::vector<std::byte>> compress_payload(std::span<const std::byte> bytes, std::size_t width) {
  if (bytes.empty() || width == 0 || bytes.size() % width != 0) {
    return std::nullopt;
  }
  std::vector<std::byte> planes(bytes.size());
  regroup(bytes.data(), planes.data(), bytes.size(), width, true);
  ZSTD_CCtx* ctx = compression_context();
  if (ctx == nullptr) {
    return std::nullopt;
  }
  (void)ZSTD_CCtx_reset(ctx, ZSTD_reset_session_and_parameters);
  (void)ZSTD_CCtx_setParameter(ctx, ZSTD_c_compressionLevel, compression_level);
  (void)ZSTD_CCtx_setPledgedSrcSize(ctx, planes.size());  // the frame states its size: the receiver checks it
  // Every plane ends a block, so each gets a literal table of its own: zstd's Huffman coding of literals does
  // not see order within a block, and a block that mixed the top plane with a low one would code both alike.
  // Anything that does not come out smaller is sent as it is, so the output never needs more room.
  std::vector<std::byte> out(bytes.size());
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  const std::size_t planes_n = width <= 2 || width == 4 ? width : 1;
  const std::size_t plane = planes.size() / planes_n;
  for (std::size_t p = 0; p < planes_n; ++p) {
    ZSTD_inBuffer in{planes.data() + p * plane, plane, 0};
    const auto mode = p + 1 == planes_n ? ZSTD_e_end : ZSTD_e_flush;
    for (;;) {
      const std::size_t left = ZSTD_compressStream2(ctx, &o, &in, mode);
      if (ZSTD_isError(left) != 0 || (left != 0 && o.pos == o.size)) {
        return std::nullopt;  // an error, or no smaller than the values
      }
      if (left == 0) {
        break;
      }
    }
  }
  if (o.pos >= bytes.size()) {
    return std::nullopt;
  }
  out.resize(o.pos);
  return out;
}

expected<void> decompress_payload(std::span<const std::byte> packed, std::size_t width, std::span<std::byte> out) {
  if (width == 0 || out.size() % width != 0) {
    return fail(errc::protocol_error, "compressed payload of values " + std::to_string(width) + " bytes wide");
  }
  const unsigned long long size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size != out.size()) {
    return fail(errc::protocol_error, "compressed payload does not hold " + std::to_string(out.size()) + " bytes");
  }
  std::vector<std::byte> planes(out.size());
  ZSTD_DCtx* ctx = decompression_context();
  if (ctx == nullptr) {
    return fail(errc::protocol_error, "no memory to decompress a payload");
  }
  const std::size_t n = ZSTD_decompressDCtx(ctx, planes.data(), planes.size(), packed.data(), packed.size());
  if (ZSTD_isError(n) != 0 || n != out.size()) {
    return fail(errc::protocol_error, std::string{"compressed payload is corrupt: "} +
                                          (ZSTD_isError(n) != 0 ? ZSTD_getErrorName(n) : "short"));
  }
  regroup(planes.data(), out.data(), out.size(), width, false);
  return {};
}

}  // namespace prsgd::actors
