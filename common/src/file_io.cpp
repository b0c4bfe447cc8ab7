// SPDX-License-Identifier: Apache-2.0
#include "prsgd/common/file_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

namespace prsgd {

namespace {
std::string errno_text() { return std::strerror(errno); }

// A temp name no other writer picks: this process, a per-process counter and 32 random bits.
std::filesystem::path temp_name_for(const std::filesystem::path& dir, const std::filesystem::path& path) {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937 bits{std::random_device{}()};
  return dir / ("." + path.filename().string() + "." + std::to_string(::getpid()) + "." +
                std::to_string(counter.fetch_add(1)) + "." + std::to_string(bits()) + ".tmp");
}
}  // namespace

expected<void> write_file_atomically(const std::filesystem::path& path, const std::vector<unsigned char>& bytes,
                                     unsigned mode) {
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path{"."};
  const auto tmp = temp_name_for(dir, path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) {
    return fail(errc::io_error, "create " + tmp.string() + ": " + errno_text());
  }
  auto abandon = [&](const std::string& what) {
    std::string text = what + " " + tmp.string() + ": " + errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    return fail(errc::io_error, std::move(text));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return abandon("write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    return abandon("fsync");
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return fail(errc::io_error, "close " + tmp.string() + ": " + errno_text());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string text = "rename to " + path.string() + ": " + errno_text();
    ::unlink(tmp.c_str());
    return fail(errc::io_error, std::move(text));
  }
  // The rename is durable only once the directory entry is on disk.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    return fail(errc::io_error, "open directory " + dir.string() + ": " + errno_text());
  }
  const int rc = ::fsync(dfd);
  ::close(dfd);
  if (rc != 0) {
    return fail(errc::io_error, "fsync directory " + dir.string() + ": " + errno_text());
  }
  return {};
}

expected<std::vector<unsigned char>> read_whole_file(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in) {
    return fail(errc::io_error, "cannot open " + path.string() + ": " + errno_text());
  }
  std::vector<unsigned char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) {
    return fail(errc::io_error, "cannot read " + path.string());
  }
  return bytes;
}

}  // namespace prsgd
