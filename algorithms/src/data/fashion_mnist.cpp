// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/fashion_mnist.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <span>

namespace prsgd::algorithms {
namespace {

// Refuses headers that would make us allocate absurd buffers before the data proves them.
constexpr std::uint64_t max_idx_bytes = std::uint64_t{1} << 32;
constexpr std::size_t chunk_bytes = std::size_t{1} << 20;

struct gz_closer {
  void operator()(gzFile f) const noexcept { gzclose(f); }
};
using gz_ptr = std::unique_ptr<std::remove_pointer_t<gzFile>, gz_closer>;

// Reads up to `len` bytes; returns the count read or -1 on a zlib error (message in `err`).
long long gz_read_fully(gzFile f, std::uint8_t* dst, std::size_t len, std::string& err) {
  std::size_t total = 0;
  while (total < len) {
    const auto want = static_cast<unsigned>(std::min<std::size_t>(len - total, chunk_bytes));
    const int got = gzread(f, dst + total, want);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f, &code);
      err = msg != nullptr ? msg : "zlib error";
      return -1;
    }
    if (got == 0) {
      break;
    }
    total += static_cast<std::size_t>(got);
  }
  return static_cast<long long>(total);
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24U) | (std::uint32_t{p[1]} << 16U) | (std::uint32_t{p[2]} << 8U) |
         std::uint32_t{p[3]};
}

}  // namespace

std::string fashion_mnist_default_dir() {
  const char* env = std::getenv("PRSGD_FMNIST_DIR");  // NOLINT(concurrency-mt-unsafe): read-only use
  if (env != nullptr && env[0] != '\0') {
    return env;
  }
  return std::string{fashion_mnist_debian_dir};
}

expected<std::vector<std::uint32_t>> read_idx_gz(const std::string& path, int expected_rank, std::size_t max_items,
                                                 const idx_header_fn& on_header, const idx_chunk_fn& on_chunk) {
  if (expected_rank < 1 || expected_rank > 4) {
    return fail(errc::invalid_argument, "read_idx_gz: rank must be in [1,4]");
  }
  // zlib silently passes non-gzip files through, so check the gzip magic ourselves first.
  {
    std::FILE* raw = std::fopen(path.c_str(), "rb");
    if (raw == nullptr) {
      return fail(errc::io_error, path + ": cannot open");
    }
    std::array<unsigned char, 2> magic{};
    const std::size_t got = std::fread(magic.data(), 1, magic.size(), raw);
    std::fclose(raw);
    if (got != 2 || magic[0] != 0x1f || magic[1] != 0x8b) {
      return fail(errc::decode_failed, path + ": not a gzip file");
    }
  }
  gz_ptr file{gzopen(path.c_str(), "rb")};
  if (!file) {
    return fail(errc::io_error, path + ": cannot open");
  }
  gzbuffer(file.get(), 1U << 17U);
  std::string err;
  const std::size_t header_len = 4 + 4 * static_cast<std::size_t>(expected_rank);
  std::array<std::uint8_t, 20> header{};
  const long long hgot = gz_read_fully(file.get(), header.data(), header_len, err);
  if (hgot < 0) {
    return fail(errc::decode_failed, path + ": corrupt gzip stream: " + err);
  }
  if (static_cast<std::size_t>(hgot) < header_len) {
    return fail(errc::decode_failed, path + ": truncated IDX header");
  }
  const std::uint32_t magic = be32(header.data());
  const std::uint32_t want_magic = 0x00000800U | static_cast<std::uint32_t>(expected_rank);
  if (magic != want_magic) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ": bad IDX magic 0x%08x (expected 0x%08x)", magic, want_magic);
    return fail(errc::decode_failed, path + buf);
  }
  std::vector<std::uint32_t> dims;
  std::uint64_t total = 1;
  std::uint64_t item = 1;
  for (int d = 0; d < expected_rank; ++d) {
    const std::uint32_t v = be32(header.data() + 4 + 4 * d);
    dims.push_back(v);
    total *= v;
    if (d > 0) {
      item *= v;
    }
    if (total > max_idx_bytes) {
      return fail(errc::decode_failed, path + ": IDX dimensions too large");
    }
  }
  const std::uint64_t keep_items = max_items == 0 ? dims[0] : std::min<std::uint64_t>(dims[0], max_items);
  const std::uint64_t keep_bytes = keep_items * item;
  std::vector<std::uint32_t> kept = dims;
  kept[0] = static_cast<std::uint32_t>(keep_items);
  if (on_header) {
    PRSGD_TRY(on_header(kept));
  }
  // The payload goes to on_chunk through one chunk-sized buffer: nothing here grows with the file.
  std::uint64_t done = 0;
  std::vector<std::uint8_t> scratch;
  while (done < total) {
    // A chunk ends at the kept/skipped boundary, so on_chunk sees exactly the kept bytes.
    const std::uint64_t limit = done < keep_bytes ? keep_bytes : total;
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(limit - done, chunk_bytes));
    scratch.resize(want);
    const long long got = gz_read_fully(file.get(), scratch.data(), want, err);
    if (got < 0) {
      return fail(errc::decode_failed, path + ": corrupt gzip stream: " + err);
    }
    if (static_cast<std::size_t>(got) < want) {
      return fail(errc::decode_failed, path + ": truncated data (" + std::to_string(done + got) + " of " +
                                           std::to_string(total) + " bytes)");
    }
    if (done < keep_bytes && on_chunk) {
      on_chunk(std::span<const std::uint8_t>{scratch.data(), want});
    }
    done += want;
  }
  std::uint8_t extra = 0;
  const long long tail = gz_read_fully(file.get(), &extra, 1, err);
  if (tail < 0) {
    return fail(errc::decode_failed, path + ": corrupt gzip stream: " + err);
  }
  if (tail > 0) {
    return fail(errc::decode_failed, path + ": trailing bytes after IDX payload");
  }
  return kept;
}

expected<idx_bytes> read_idx_gz(const std::string& path, int expected_rank, std::size_t max_items) {
  idx_bytes out;
  // Grows as data arrives, so a lying header cannot make us allocate before the bytes exist.
  auto dims = read_idx_gz(path, expected_rank, max_items, {}, [&out](std::span<const std::uint8_t> chunk) {
    out.data.insert(out.data.end(), chunk.begin(), chunk.end());
  });
  PRSGD_TRY(dims);
  out.dims = std::move(*dims);
  return out;
}

namespace {

// <dir>/<train|t10k>-<kind>-<idxN>-ubyte.gz
std::string split_file(std::string_view dir, split which, const char* kind) {
  std::string base = dir.empty() ? fashion_mnist_default_dir() : std::string{dir};
  if (!base.empty() && base.back() != '/') {
    base += '/';
  }
  return base + (which == split::train ? "train" : "t10k") + "-" + kind + "-ubyte.gz";
}

}  // namespace

expected<std::size_t> fashion_mnist_size(std::string_view dir, split which) {
  auto labels = read_idx_gz(split_file(dir, which, "labels-idx1"), 1);
  PRSGD_TRY(labels);
  return static_cast<std::size_t>(labels->dims[0]);
}

expected<std::vector<std::int32_t>> fashion_mnist_labels(std::string_view dir, split which) {
  auto labels = read_idx_gz(split_file(dir, which, "labels-idx1"), 1);
  PRSGD_TRY(labels);
  return std::vector<std::int32_t>(labels->data.begin(), labels->data.end());
}

expected<dataset> load_fashion_mnist(std::string_view dir, split which, fashion_mnist_options options) {
  const std::string images_path = split_file(dir, which, "images-idx3");
  const std::string labels_path = split_file(dir, which, "labels-idx1");

  auto labels = read_idx_gz(labels_path, 1, options.max_samples);
  PRSGD_TRY(labels);
  dataset out;
  out.shape = {1, 28, 28};
  out.num_classes = 10;
  out.name = std::string{"fashion-mnist/"} + (which == split::train ? "train" : "test");
  out.labels.resize(labels->data.size());
  for (std::size_t i = 0; i < labels->data.size(); ++i) {
    const std::uint8_t l = labels->data[i];
    if (l >= 10) {
      return fail(errc::decode_failed,
                  labels_path + ": label " + std::to_string(l) + " at index " + std::to_string(i) + " out of [0,10)");
    }
    out.labels[i] = l;
  }
  // A 256-entry table keeps the conversion exact and identical for every pixel with the same byte.
  std::array<float, 256> table{};
  for (int b = 0; b < 256; ++b) {
    const float x = static_cast<float>(b) / 255.0F;
    table[static_cast<std::size_t>(b)] = options.normalise ? (x - fashion_mnist_mean) / fashion_mnist_std : x;
  }
  // The image bytes are converted as they are decompressed, a chunk at a time, into features sized once
  // from the checked header (its count equals the label file's, so the allocation is backed by real
  // data): no byte copy of the whole split (47 MB for train) is ever held. With glibc told to keep freed
  // memory (what prsgd's processes do, transport/zmq), such a copy stayed resident: a one-thread
  // fmnist-cnn training process (prsgd_nn_bench train) peaked at data + 85 MiB instead of data + 27.
  auto check = [&](const std::vector<std::uint32_t>& dims) -> expected<void> {
    if (dims[1] != 28 || dims[2] != 28) {
      return fail(errc::decode_failed, images_path + ": images are " + std::to_string(dims[1]) + "x" +
                                           std::to_string(dims[2]) + ", expected 28x28");
    }
    if (dims[0] != labels->dims[0]) {
      return fail(errc::decode_failed, images_path + " has " + std::to_string(dims[0]) + " images but " + labels_path +
                                           " has " + std::to_string(labels->dims[0]) + " labels");
    }
    out.features.reserve(std::size_t{dims[0]} * 28 * 28);
    return {};
  };
  auto convert = [&](std::span<const std::uint8_t> chunk) {
    const std::size_t at = out.features.size();
    out.features.resize(at + chunk.size());  // within the reserved capacity: never reallocates
    std::transform(chunk.begin(), chunk.end(), out.features.begin() + static_cast<std::ptrdiff_t>(at),
                   [&table](std::uint8_t b) { return table[b]; });
  };
  auto images = read_idx_gz(images_path, 3, options.max_samples, check, convert);
  PRSGD_TRY(images);
  return out;
}

}  // namespace prsgd::algorithms
