// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Names which half of Fashion-MNIST to load.
enum class split : std::uint8_t {
  /// train-{images-idx3,labels-idx1}-ubyte.gz, 60000 samples.
  train,
  /// t10k-{images-idx3,labels-idx1}-ubyte.gz, 10000 samples.
  test,
};

/// Holds the per-pixel normalisation applied after scaling bytes to [0,1]: (x - mean) / std.
inline constexpr float fashion_mnist_mean = 0.2860F;
/// Holds the standard deviation used by the Fashion-MNIST normalisation.
inline constexpr float fashion_mnist_std = 0.3530F;
/// Holds the directory where Debian's dataset-fashion-mnist package installs the files.
inline constexpr std::string_view fashion_mnist_debian_dir = "/usr/share/datasets/fashion-mnist";

/// Returns $PRSGD_FMNIST_DIR when set and non-empty, else fashion_mnist_debian_dir.
[[nodiscard]] std::string fashion_mnist_default_dir();

/// Describes optional limits and transforms for load_fashion_mnist.
struct fashion_mnist_options {
  /// Loads at most this many samples (the first ones in file order); 0 loads all.
  std::size_t max_samples = 0;
  /// Applies (x/255 - mean)/std when true; leaves x/255 in [0,1] when false.
  bool normalise = true;
};

/// Loads one split of Fashion-MNIST from the gzip IDX files in `dir`.
/// An empty `dir` means fashion_mnist_default_dir() (honours PRSGD_FMNIST_DIR).
/// Result: shape {1,28,28}, 10 classes, labels in [0,10), name "fashion-mnist/<split>".
/// Returns io_error when a file is missing or unreadable and decode_failed (naming the file) when a
/// file is not gzip, has a bad IDX magic or shape, is truncated or has trailing bytes, when image and
/// label counts differ, or when a label is out of range.
[[nodiscard]] expected<dataset> load_fashion_mnist(std::string_view dir = {}, split which = split::train,
                                                   fashion_mnist_options options = {});

/// Returns the table load_fashion_mnist converts pixel bytes with: `table[b]` is byte b as the model sees it.
[[nodiscard]] std::array<float, 256> fashion_mnist_values(bool normalise = true);

/// Returns the directory where load_fashion_mnist_shared keeps the byte caches of the files in `dir` (empty:
/// fashion_mnist_default_dir()): `<dir>/.prsgd-cache` when `dir` is not Debian's read-only location and this
/// process may write there (or create it), else `$XDG_CACHE_HOME/prsgd/fashion-mnist-<hash of dir>`
/// (`$XDG_CACHE_HOME` defaults to `~/.cache`).
[[nodiscard]] std::filesystem::path fashion_mnist_cache_dir(std::string_view dir = {});

/// Holds one split loaded by load_fashion_mnist_shared.
struct shared_split {
  /// The split, its samples as bytes (`dataset::bytes`), its labels in memory.
  dataset data;
  /// The cache file the bytes are mapped from; empty when no cache could be written (the bytes are then
  /// this process's own copy, and a warning was logged).
  std::filesystem::path cache_file;
  /// True when this call wrote the cache file (it was missing, stale or corrupt).
  bool built = false;
};

/// Loads one split of Fashion-MNIST the way a host's processes share it: the images stay bytes (one per
/// pixel, as stored) in a cache file under `cache_dir` (empty: fashion_mnist_cache_dir(dir)) that every
/// process maps read-only, so the page cache holds one copy per host; a model turns bytes into floats a
/// batch at a time with fashion_mnist_values(options.normalise), so training sees exactly the values
/// load_fashion_mnist() gives. The first process builds the file from the gzip files while holding an
/// exclusive lock on `<file>.lock` (the others wait, then map it); it is written beside its final name and
/// renamed, and carries the source files' sizes and modification times and a CRC-32 of its contents. A
/// file that is stale, truncated or corrupt is rebuilt (one warning line says why). When the cache cannot
/// be written, the bytes are decoded into this process's memory instead (one warning line). Errors as for
/// load_fashion_mnist; `options.max_samples` must be 0.
[[nodiscard]] expected<shared_split> load_fashion_mnist_shared(std::string_view dir = {}, split which = split::train,
                                                               const std::filesystem::path& cache_dir = {},
                                                               fashion_mnist_options options = {});

/// Number of samples in one split, read from its (small) label file alone: what a process that needs only
/// the split's size (the averager planning epochs) reads instead of decompressing every image. The image
/// file is not opened; load_fashion_mnist validates both. Errors as for load_fashion_mnist.
[[nodiscard]] expected<std::size_t> fashion_mnist_size(std::string_view dir = {}, split which = split::train);

/// The labels of one split, read from its label file alone (for the data fingerprint's label hash).
[[nodiscard]] expected<std::vector<std::int32_t>> fashion_mnist_labels(std::string_view dir = {},
                                                                       split which = split::train);

/// Holds the raw contents of an IDX file of unsigned bytes (type code 0x08).
struct idx_bytes {
  /// Dimension sizes from the header (1 for labels, 3 for images).
  std::vector<std::uint32_t> dims;
  /// The payload, product(dims) bytes (or fewer when a max_items limit applied to dims[0]).
  std::vector<std::uint8_t> data;
};

/// Reads a gzip-compressed IDX file of unsigned bytes with `expected_rank` dimensions, keeping at most
/// `max_items` items along the first dimension (0: all; the rest of the file is still validated).
/// Returns io_error / decode_failed as described for load_fashion_mnist.
[[nodiscard]] expected<idx_bytes> read_idx_gz(const std::string& path, int expected_rank, std::size_t max_items = 0);

/// Called once with the dimensions (dims[0] already limited by max_items) before any payload byte;
/// an error stops the read and is returned.
using idx_header_fn = std::function<expected<void>(const std::vector<std::uint32_t>& dims)>;
/// Called with consecutive pieces (at most 1 MiB each) of the kept payload, in file order.
using idx_chunk_fn = std::function<void(std::span<const std::uint8_t> chunk)>;

/// read_idx_gz without holding the payload: validates as above and streams the kept bytes to `on_chunk`
/// through one chunk-sized buffer. Returns the dimensions (dims[0] limited by max_items). Either callback
/// may be empty.
[[nodiscard]] expected<std::vector<std::uint32_t>> read_idx_gz(const std::string& path, int expected_rank,
                                                               std::size_t max_items, const idx_header_fn& on_header,
                                                               const idx_chunk_fn& on_chunk);

}  // namespace prsgd::algorithms
