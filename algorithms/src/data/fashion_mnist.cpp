// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/fashion_mnist.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <system_error>

#include "dataset_files.hpp"
#include "prsgd/common/log.hpp"

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

namespace {

// The split's labels as a data set holds them, or decode_failed naming the first one out of [0, 10).
expected<std::vector<std::int32_t>> checked_labels(const idx_bytes& labels, const std::string& path) {
  std::vector<std::int32_t> out(labels.data.size());
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    const std::uint8_t l = labels.data[i];
    if (l >= 10) {
      return fail(errc::decode_failed,
                  path + ": label " + std::to_string(l) + " at index " + std::to_string(i) + " out of [0,10)");
    }
    out[i] = l;
  }
  return out;
}

// Checks an image file's dimensions against 28x28 and its label file's count.
expected<void> check_images(const std::vector<std::uint32_t>& dims, const std::string& images_path,
                            const idx_bytes& labels, const std::string& labels_path) {
  if (dims[1] != 28 || dims[2] != 28) {
    return fail(errc::decode_failed, images_path + ": images are " + std::to_string(dims[1]) + "x" +
                                         std::to_string(dims[2]) + ", expected 28x28");
  }
  if (dims[0] != labels.dims[0]) {
    return fail(errc::decode_failed, images_path + " has " + std::to_string(dims[0]) + " images but " + labels_path +
                                         " has " + std::to_string(labels.dims[0]) + " labels");
  }
  return {};
}

}  // namespace

std::array<float, 256> fashion_mnist_values(bool normalise) {
  std::array<float, 256> table{};
  for (int b = 0; b < 256; ++b) {
    const float x = static_cast<float>(b) / 255.0F;
    table[static_cast<std::size_t>(b)] = normalise ? (x - fashion_mnist_mean) / fashion_mnist_std : x;
  }
  return table;
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
  auto checked = checked_labels(*labels, labels_path);
  PRSGD_TRY(checked);
  out.labels = std::move(*checked);
  // A 256-entry table keeps the conversion exact and identical for every pixel with the same byte.
  const std::array<float, 256> table = fashion_mnist_values(options.normalise);
  // The image bytes are converted as they are decompressed, a chunk at a time, into features sized once
  // from the checked header (its count equals the label file's, so the allocation is backed by real
  // data): no byte copy of the whole split (47 MB for train) is ever held. With glibc told to keep freed
  // memory (what prsgd's processes do, transport/zmq), such a copy stayed resident: a one-thread
  // fmnist-cnn training process (prsgd_nn_bench train) peaked at data + 85 MiB instead of data + 27.
  auto check = [&](const std::vector<std::uint32_t>& dims) -> expected<void> {
    PRSGD_TRY(check_images(dims, images_path, *labels, labels_path));
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

// ---- the shared byte cache ----------------------------------------------------------------------

namespace {

namespace fs = std::filesystem;

// The cache file: a 4096-byte header (cache_header, then zeros), the labels (one byte each), the images
// (one byte per pixel, in file order). Host byte order: a cache never leaves its host.
constexpr char cache_magic[8] = {'P', 'R', 'S', 'G', 'D', 'U', '8', 'C'};
constexpr std::uint32_t cache_version = 1;
constexpr std::size_t cache_header_bytes = 4096;

struct cache_header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t crc;  // CRC-32 of everything after the header
  std::uint64_t count;
  std::uint32_t rows;
  std::uint32_t cols;
  std::uint64_t source;  // source_fingerprint() of the gzip files it was made from
  std::uint64_t payload;
};
static_assert(sizeof(cache_header) <= cache_header_bytes);

const char* split_name(split which) { return which == split::train ? "train" : "test"; }

// Sizes and modification times of the split's two gzip files: a changed file makes the cache stale.
expected<std::uint64_t> source_fingerprint(const std::string& images, const std::string& labels) {
  fnv1a h;
  for (const std::string* path : {&images, &labels}) {
    struct stat st {};
    if (::stat(path->c_str(), &st) != 0) {
      return fail(errc::io_error, *path + ": cannot open: " + std::strerror(errno));
    }
    h.add_value(static_cast<std::uint64_t>(st.st_size));
    h.add_value(static_cast<std::int64_t>(st.st_mtim.tv_sec));
    h.add_value(static_cast<std::int64_t>(st.st_mtim.tv_nsec));
  }
  return h.value();
}

// A read-only mapping of a whole cache file.
struct mapped_file {
  std::shared_ptr<const void> owner;
  const std::uint8_t* base = nullptr;
  std::size_t size = 0;
};

// Maps `file` and checks it: the header, the size, the CRC and the labels. Returns the mapping, or why the
// file cannot be used (not_found when it does not exist).
expected<mapped_file> open_cache(const fs::path& file, std::uint64_t source) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return fail(errno == ENOENT ? errc::not_found : errc::io_error,
                std::string{"cannot open: "} + std::strerror(errno));
  }
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  const auto size = stated ? static_cast<std::size_t>(st.st_size) : 0;
  if (size < cache_header_bytes) {
    ::close(fd);
    return fail(errc::decode_failed, "truncated (" + std::to_string(size) + " bytes)");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (addr == MAP_FAILED) {
    return fail(errc::io_error, std::string{"cannot map: "} + std::strerror(errno));
  }
  mapped_file m;
  m.owner = std::shared_ptr<const void>(addr, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  m.base = static_cast<const std::uint8_t*>(addr);
  m.size = size;
  cache_header h{};
  std::memcpy(&h, m.base, sizeof h);
  if (std::memcmp(h.magic, cache_magic, sizeof cache_magic) != 0 || h.version != cache_version) {
    return fail(errc::decode_failed, "not a byte cache of this version");
  }
  if (h.source != source) {
    return fail(errc::decode_failed, "made from other source files (they changed since)");
  }
  const std::uint64_t per_sample = std::uint64_t{h.rows} * h.cols;
  if (h.rows != 28 || h.cols != 28 || h.payload != h.count * (1 + per_sample) ||
      size - cache_header_bytes != h.payload) {
    return fail(errc::decode_failed, "truncated or of the wrong size (" + std::to_string(size) + " bytes)");
  }
  if (crc32_update(0, m.base + cache_header_bytes, h.payload) != h.crc) {
    return fail(errc::checksum_mismatch, "CRC-32 mismatch (corrupt)");
  }
  const std::uint8_t* labels = m.base + cache_header_bytes;
  if (std::any_of(labels, labels + h.count, [](std::uint8_t l) { return l >= 10; })) {
    return fail(errc::decode_failed, "label out of range (corrupt)");
  }
  return m;
}

dataset split_from(const mapped_file& m, split which, bool normalise) {
  cache_header h{};
  std::memcpy(&h, m.base, sizeof h);
  dataset d;
  d.shape = {1, static_cast<int>(h.rows), static_cast<int>(h.cols)};
  d.num_classes = 10;
  d.name = std::string{"fashion-mnist/"} + split_name(which);
  const std::uint8_t* labels = m.base + cache_header_bytes;
  d.labels.assign(labels, labels + h.count);
  auto bytes = std::make_shared<byte_samples>();
  bytes->owner = m.owner;
  bytes->data = labels + h.count;
  bytes->values = fashion_mnist_values(normalise);
  d.bytes = std::move(bytes);
  return d;
}

// Closes a FILE* on every path.
struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

// Decodes the split's gzip files into `file` (written beside it, then renamed). Errors in the sources are
// returned as load_fashion_mnist returns them; io_error when the file cannot be written.
expected<void> build_cache(const fs::path& file, const std::string& images_path, const std::string& labels_path,
                           std::uint64_t source) {
  auto labels = read_idx_gz(labels_path, 1);
  PRSGD_TRY(labels);
  PRSGD_TRY(checked_labels(*labels, labels_path));
  fs::path tmp = file;
  tmp += ".tmp." + std::to_string(::getpid());
  std::unique_ptr<std::FILE, file_closer> out{std::fopen(tmp.c_str(), "wb")};
  if (!out) {
    return fail(errc::io_error, tmp.string() + ": cannot create: " + std::strerror(errno));
  }
  std::vector<std::uint8_t> zeros(cache_header_bytes, 0);
  bool ok = std::fwrite(zeros.data(), 1, zeros.size(), out.get()) == zeros.size();
  std::uint32_t crc = crc32_update(0, labels->data.data(), labels->data.size());
  ok = ok && std::fwrite(labels->data.data(), 1, labels->data.size(), out.get()) == labels->data.size();
  cache_header h{};
  std::memcpy(h.magic, cache_magic, sizeof cache_magic);
  h.version = cache_version;
  h.source = source;
  auto check = [&](const std::vector<std::uint32_t>& dims) -> expected<void> {
    PRSGD_TRY(check_images(dims, images_path, *labels, labels_path));
    h.count = dims[0];
    h.rows = dims[1];
    h.cols = dims[2];
    return {};
  };
  auto write = [&](std::span<const std::uint8_t> chunk) {
    crc = crc32_update(crc, chunk.data(), chunk.size());
    ok = ok && std::fwrite(chunk.data(), 1, chunk.size(), out.get()) == chunk.size();
  };
  auto images = read_idx_gz(images_path, 3, 0, check, write);
  const auto discard = [&] {
    out.reset();
    std::error_code ec;
    fs::remove(tmp, ec);
  };
  if (!images) {
    discard();
    return unexpected{images.error()};
  }
  h.crc = crc;
  h.payload = h.count * (1 + std::uint64_t{h.rows} * h.cols);
  ok = ok && std::fseek(out.get(), 0, SEEK_SET) == 0 && std::fwrite(&h, 1, sizeof h, out.get()) == sizeof h;
  ok = ok && std::fflush(out.get()) == 0;
  if (!ok) {
    const std::string why = std::strerror(errno);
    discard();
    return fail(errc::io_error, tmp.string() + ": cannot write: " + why);
  }
  out.reset();
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) {
    discard();
    return fail(errc::io_error, file.string() + ": cannot install: " + ec.message());
  }
  return {};
}

// Without a cache file: the split's bytes in this process's memory (a quarter of the floats).
expected<dataset> load_private_bytes(const std::string& images_path, const std::string& labels_path, split which,
                                     bool normalise) {
  auto labels = read_idx_gz(labels_path, 1);
  PRSGD_TRY(labels);
  auto images = std::make_shared<idx_bytes>();
  auto read = read_idx_gz(images_path, 3);
  PRSGD_TRY(read);
  *images = std::move(*read);
  PRSGD_TRY(check_images(images->dims, images_path, *labels, labels_path));
  auto checked = checked_labels(*labels, labels_path);
  PRSGD_TRY(checked);
  dataset d;
  d.shape = {1, 28, 28};
  d.num_classes = 10;
  d.name = std::string{"fashion-mnist/"} + split_name(which);
  d.labels = std::move(*checked);
  auto bytes = std::make_shared<byte_samples>();
  bytes->data = images->data.data();
  bytes->owner = std::move(images);
  bytes->values = fashion_mnist_values(normalise);
  d.bytes = std::move(bytes);
  return d;
}

bool writable_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  return !ec && ::access(dir.c_str(), W_OK | X_OK) == 0;
}

}  // namespace

fs::path fashion_mnist_cache_dir(std::string_view dir) {
  const fs::path data = fs::absolute(dir.empty() ? fashion_mnist_default_dir() : std::string{dir});
  if (data != fs::path{fashion_mnist_debian_dir} && ::access(data.c_str(), W_OK | X_OK) == 0) {
    return data / ".prsgd-cache";
  }
  fs::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    base = fs::path{home} / ".cache";
  } else {
    base = fs::temp_directory_path();
  }
  fnv1a h;
  h.add(data.string());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.value()));
  return base / "prsgd" / (std::string{"fashion-mnist-"} + hex);
}

expected<shared_split> load_fashion_mnist_shared(std::string_view dir, split which, const fs::path& cache_dir,
                                                 fashion_mnist_options options) {
  if (options.max_samples != 0) {
    return fail(errc::invalid_argument, "load_fashion_mnist_shared: max_samples must be 0");
  }
  const std::string images_path = split_file(dir, which, "images-idx3");
  const std::string labels_path = split_file(dir, which, "labels-idx1");
  auto source = source_fingerprint(images_path, labels_path);
  PRSGD_TRY(source);
  const fs::path where = cache_dir.empty() ? fashion_mnist_cache_dir(dir) : cache_dir;
  shared_split out;
  out.cache_file = where / (std::string{"fashion-mnist-"} + split_name(which) + ".u8");
  if (auto mapped = open_cache(out.cache_file, *source)) {
    out.data = split_from(*mapped, which, options.normalise);
    return out;
  }
  const auto private_copy = [&](const std::string& why) -> expected<shared_split> {
    PRSGD_LOG(warn, "data") << out.cache_file.string() << ": " << why
                            << "; this process keeps its own copy of the images";
    auto d = load_private_bytes(images_path, labels_path, which, options.normalise);
    PRSGD_TRY(d);
    return shared_split{std::move(*d), {}, false};
  };
  if (!writable_dir(where)) {
    return private_copy("cannot write the cache directory");
  }
  // One process of the host builds the file; the others wait here, then find it valid.
  const cache_lock lock{out.cache_file};
  auto found = open_cache(out.cache_file, *source);
  if (found) {
    out.data = split_from(*found, which, options.normalise);
    return out;
  }
  if (found.error().code != errc::not_found) {
    PRSGD_LOG(warn, "data") << out.cache_file.string() << ": " << found.error().context << "; rebuilding it";
  }
  auto built = build_cache(out.cache_file, images_path, labels_path, *source);
  if (!built) {
    if (built.error().code == errc::io_error && built.error().context.rfind(out.cache_file.string(), 0) == 0) {
      return private_copy(built.error().context);
    }
    return unexpected{built.error()};
  }
  auto mapped = open_cache(out.cache_file, *source);
  if (!mapped) {
    return fail(mapped.error().code,
                out.cache_file.string() + ": " + mapped.error().context + " right after writing it");
  }
  out.data = split_from(*mapped, which, options.normalise);
  out.built = true;
  return out;
}

}  // namespace prsgd::algorithms
