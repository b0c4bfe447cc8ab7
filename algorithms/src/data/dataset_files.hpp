// SPDX-License-Identifier: Apache-2.0
// Pieces the file-based data set loaders share (npy.cpp, csv_data.cpp, kws_data.cpp); private to the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// The largest label a file may hold: a million classes is beyond any model this library builds.
inline constexpr std::int64_t max_label = 999'999;

/// Returns decode_failed "`file`: label `v` at `where` is negative / too large" unless 0 <= v <= max_label.
[[nodiscard]] expected<void> check_label(std::int64_t v, const std::string& file, const std::string& where);

/// Names one split's labels for class_count.
struct split_labels {
  const std::vector<std::int32_t>* labels;
  /// The file they came from, for errors.
  std::string file;
  /// Says where label i is, e.g. "row 3" or "line 4": the prefix, then i + first.
  std::string unit = "row";
  int first = 0;
};

/// Returns the class count: the option `classes` (refusing any label >= it, naming file and row), or the
/// largest label of all splits + 1.
[[nodiscard]] expected<int> class_count(const dataset_request& request, std::initializer_list<split_labels> splits);

/// Accumulates a 64-bit FNV-1a hash.
class fnv1a {
 public:
  void add(const void* data, std::size_t n) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    for (std::size_t i = 0; i < n; ++i) {
      h_ = (h_ ^ p[i]) * 1099511628211ULL;
    }
  }
  void add(std::string_view s) {
    add(s.data(), s.size());
    add_value(static_cast<std::uint64_t>(s.size()));
  }
  template <class T>
  void add_value(T v) {
    add(&v, sizeof v);
  }
  [[nodiscard]] std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = 14695981039346656037ULL;
};

/// Splits one CSV line into cells at commas; a cell may be double-quoted ("" is a quote inside one). A
/// trailing '\r' is dropped.
[[nodiscard]] std::vector<std::string> split_csv_line(std::string_view line);

/// Returns the CRC-32 (zlib's) of `n` more bytes at `data`, continuing from `crc` (0 to start).
[[nodiscard]] std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* data, std::size_t n);

/// Holds an exclusive flock on `<cache>.lock` while one process checks, computes and writes a cache file, so
/// the processes of a job that start together compute it once: the others wait, then read the cache.
/// Best effort: without a writable directory it holds nothing and every process computes on its own.
/// Not copyable; the lock is released when it is destroyed.
class cache_lock {
 public:
  explicit cache_lock(const std::filesystem::path& cache);
  cache_lock(const cache_lock&) = delete;
  cache_lock& operator=(const cache_lock&) = delete;
  ~cache_lock();
  /// Returns whether the lock is held.
  [[nodiscard]] bool held() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace prsgd::algorithms
