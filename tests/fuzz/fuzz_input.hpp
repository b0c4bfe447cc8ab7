// SPDX-License-Identifier: Apache-2.0
// What the fuzz targets share: the input layout (parts split at a separator), a property check that stops
// the fuzzer, and a private scratch directory for the decoders that read files.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace prsgd::fuzz {

/// Separates the parts of one fuzz input (frames of a message, the files of a data set). Eight bytes that
/// no seed holds inside a part; a separator the mutator breaks simply merges two parts, which keeps most
/// mutations meaningful (a length prefix, once mutated, would scramble everything after it).
inline constexpr std::string_view separator{"\xF0\x9F\x92\xA5PART", 8};

/// Returns the parts of `data`: the bytes between separators (one part when there is none).
[[nodiscard]] inline std::vector<std::span<const std::uint8_t>> split_parts(const std::uint8_t* data,
                                                                            std::size_t size) {
  std::vector<std::span<const std::uint8_t>> parts;
  const std::string_view all{reinterpret_cast<const char*>(data), size};
  std::size_t begin = 0;
  for (;;) {
    const std::size_t at = all.find(separator, begin);
    if (at == std::string_view::npos) {
      parts.emplace_back(data + begin, size - begin);
      return parts;
    }
    parts.emplace_back(data + begin, at - begin);
    begin = at + separator.size();
  }
}

/// Returns `parts` joined by the separator (how seeds with several parts are written). Stops the process with a
/// message when a part holds the separator itself, since the fuzz target would split it.
[[nodiscard]] inline std::vector<std::uint8_t> join_parts(const std::vector<std::vector<std::uint8_t>>& parts) {
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string_view text{reinterpret_cast<const char*>(parts[i].data()), parts[i].size()};
    if (text.find(separator) != std::string_view::npos) {
      std::fprintf(stderr, "fuzz seeds: a seed part contains the part separator\n");
      std::exit(1);
    }
    if (i > 0) {
      out.insert(out.end(), separator.begin(), separator.end());
    }
    out.insert(out.end(), parts[i].begin(), parts[i].end());
  }
  return out;
}

/// Returns a copy of `n` bytes at `p` (seeds from values in memory).
[[nodiscard]] inline std::vector<std::uint8_t> raw_bytes(const void* p, std::size_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  return {b, b + n};
}

/// Returns the bytes of `text`.
[[nodiscard]] inline std::vector<std::uint8_t> text_bytes(std::string_view text) { return {text.begin(), text.end()}; }

/// Stops the fuzzer with a report when a property the decoder promises does not hold (libFuzzer saves the
/// input as a crash reproducer on abort).
#define PRSGD_FUZZ_CHECK(cond, what)                                                                     \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      std::fprintf(stderr, "fuzz property failed at %s:%d: %s (%s)\n", __FILE__, __LINE__, what, #cond); \
      std::abort();                                                                                      \
    }                                                                                                    \
  } while (false)

/// Returns a directory of this process only, created on first use under TMPDIR (ops/fuzz.sh points TMPDIR
/// at /dev/shm when it can, so the file-based decoders read from memory). Removed when the process exits.
[[nodiscard]] inline const std::filesystem::path& scratch_dir() {
  struct owned_dir {
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("prsgd-fuzz-" + std::to_string(::getpid()));
    owned_dir() { std::filesystem::create_directories(path); }
    owned_dir(const owned_dir&) = delete;
    owned_dir& operator=(const owned_dir&) = delete;
    ~owned_dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const owned_dir dir;
  return dir.path;
}

/// Writes `bytes` to `path`, replacing it.
inline void write_bytes(const std::filesystem::path& path, std::span<const std::uint8_t> bytes);

/// Receives the seeds a target makes with the real encoder: seed(name, bytes) writes one file.
using seed_sink = std::function<void(const std::string& name, const std::vector<std::uint8_t>& bytes)>;

/// Called from a target's LLVMFuzzerInitialize. When the environment variable PRSGD_FUZZ_WRITE_SEEDS names a
/// directory (ops/fuzz.sh --make-seeds), replaces DIR/`target`/ with the seeds `make` writes and exits 0;
/// otherwise does nothing.
inline void write_seeds_if_asked(const char* target, const std::function<void(const seed_sink&)>& make) {
  const char* root = std::getenv("PRSGD_FUZZ_WRITE_SEEDS");
  if (root == nullptr || *root == '\0') {
    return;
  }
  const std::filesystem::path dir = std::filesystem::path(root) / target;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  int count = 0;
  make([&](const std::string& name, const std::vector<std::uint8_t>& bytes) {
    write_bytes(dir / name, bytes);
    ++count;
  });
  std::printf("%s: %d seeds in %s\n", target, count, dir.c_str());
  std::exit(0);
}

/// Writes `bytes` to `path`, replacing it.
inline void write_bytes(const std::filesystem::path& path, std::span<const std::uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  PRSGD_FUZZ_CHECK(out.good(), "cannot write to the scratch directory");
}

}  // namespace prsgd::fuzz
