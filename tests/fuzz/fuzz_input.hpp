// SPDX-License-Identifier: Apache-2.0
// What the fuzz targets share: the input layout (parts split at a separator), a property check that stops
// the fuzzer, and a private scratch directory for the decoders that read files.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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

/// Returns whether this input is one of the roughly 1 in `one_in` a target checks in full when checking every
/// input would cost too much: decided by a hash of the bytes, so a reproducer replays the same checks.
[[nodiscard]] inline bool sampled(const std::uint8_t* data, std::size_t size, std::uint64_t one_in) {
  std::uint64_t h = 14695981039346656037ULL;  // FNV-1a
  for (std::size_t i = 0; i < size; ++i) {
    h = (h ^ data[i]) * 1099511628211ULL;
  }
  return (h >> 32U) % one_in == 0;
}

/// Stops the fuzzer with a report when a property the decoder promises does not hold (libFuzzer saves the
/// input as a crash reproducer on abort).
#define PRSGD_FUZZ_CHECK(cond, what)                                                                     \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      std::fprintf(stderr, "fuzz property failed at %s:%d: %s (%s)\n", __FILE__, __LINE__, what, #cond); \
      std::abort();                                                                                      \
    }                                                                                                    \
  } while (false)

/// Returns where scratch_dir() goes: TMPDIR when it is set, else /dev/shm when that is a writable directory
/// (memory: the npy and csv targets write every input to files, and a disk-backed /tmp makes them several
/// times slower), else the system's temporary directory.
[[nodiscard]] inline std::filesystem::path scratch_parent() {
  if (const char* tmpdir = std::getenv("TMPDIR"); tmpdir != nullptr && *tmpdir != '\0') {
    return tmpdir;
  }
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK | X_OK) == 0) {
    return "/dev/shm";
  }
  return std::filesystem::temp_directory_path();
}

/// Returns a directory of this process only, created on first use under scratch_parent(). Removed when the
/// process exits.
[[nodiscard]] inline const std::filesystem::path& scratch_dir() {
  struct owned_dir {
    std::filesystem::path path = scratch_parent() / ("prsgd-fuzz-" + std::to_string(::getpid()));
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

/// Writes `bytes` to `path`, replacing it. Plain POSIX calls: the npy and csv targets write files for every
/// input, and a stream's buffer and locale set-up cost more than the write under ASan.
inline void write_bytes(const std::filesystem::path& path, std::span<const std::uint8_t> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  PRSGD_FUZZ_CHECK(fd >= 0, "cannot write to the scratch directory");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ::ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    PRSGD_FUZZ_CHECK(n > 0, "cannot write to the scratch directory");
    done += static_cast<std::size_t>(n);
  }
  PRSGD_FUZZ_CHECK(::close(fd) == 0, "cannot write to the scratch directory");
}

}  // namespace prsgd::fuzz
