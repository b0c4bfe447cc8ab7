// SPDX-License-Identifier: Apache-2.0
#include "dataset_files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include <zlib.h>

namespace prsgd::algorithms {

expected<void> check_label(std::int64_t v, const std::string& file, const std::string& where) {
  if (v < 0) {
    return fail(errc::decode_failed, file + ": label " + std::to_string(v) + " at " + where + " is negative");
  }
  if (v > max_label) {
    return fail(errc::decode_failed, file + ": label " + std::to_string(v) + " at " + where +
                                         " is too large (at most " + std::to_string(max_label) + ")");
  }
  return {};
}

expected<int> class_count(const dataset_request& request, std::initializer_list<split_labels> splits) {
  const auto option = request.options.find("classes");
  if (option == request.options.end()) {
    std::int32_t top = -1;
    for (const auto& s : splits) {
      for (const std::int32_t l : *s.labels) {
        top = std::max(top, l);
      }
    }
    return top + 1;
  }
  const std::string& text = option->second;
  int k = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
  if (ec != std::errc{} || end != text.data() + text.size() || k < 1 || k > max_label + 1) {
    return fail(errc::invalid_argument, "--data-option classes must be an integer in 1.." +
                                            std::to_string(max_label + 1) + " (got '" + text + "')");
  }
  for (const auto& s : splits) {
    for (std::size_t i = 0; i < s.labels->size(); ++i) {
      if ((*s.labels)[i] >= k) {
        return fail(errc::decode_failed, s.file + ": label " + std::to_string((*s.labels)[i]) + " at " + s.unit + " " +
                                             std::to_string(static_cast<long long>(i) + s.first) +
                                             " is not below classes=" + std::to_string(k));
      }
    }
  }
  return k;
}

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else if (c != '\r') {
      cells.back() += c;
    }
  }
  return cells;
}

std::uint32_t crc32_update(std::uint32_t crc, const std::uint8_t* data, std::size_t n) {
  uLong c = crc;
  while (n > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1U << 30));
    c = crc32(c, data, chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(c);
}

cache_lock::cache_lock(const std::filesystem::path& cache) {
  std::filesystem::path lock = cache;
  lock += ".lock";
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

cache_lock::~cache_lock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

}  // namespace prsgd::algorithms
