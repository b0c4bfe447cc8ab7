// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/checkpoint_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include "prsgd/common/log.hpp"

namespace prsgd::actors {

namespace {

constexpr std::string_view checkpoint_log = "checkpoint";

// Parses "ckpt-<digits>.bin"; returns false for anything else.
bool parse_name(const std::string& name, std::uint64_t& round) {
  constexpr std::string_view prefix = "ckpt-";
  constexpr std::string_view suffix = ".bin";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) {
    return false;
  }
  const auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 19 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  round = std::stoull(digits);
  return true;
}

std::string file_name(round_t round) {
  std::string digits = std::to_string(round);
  return "ckpt-" + std::string(digits.size() < 12 ? 12 - digits.size() : 0, '0') + digits + ".bin";
}

std::vector<unsigned char> read_bytes(const std::filesystem::path& path, bool& ok) {
  std::ifstream in{path, std::ios::binary};
  std::vector<unsigned char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  ok = in.good() || in.eof();
  return bytes;
}

}  // namespace

expected<file_checkpoint_store> file_checkpoint_store::make(std::filesystem::path dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create checkpoint directory " + dir.string() + ": " + ec.message());
  }
  const auto lock_path = dir / "lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail(errc::io_error, "cannot open " + lock_path.string() + ": " + std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const auto n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid{holder, n > 0 ? static_cast<std::size_t>(n) : 0U};
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) {
        pid.pop_back();
      }
      return fail(errc::already_exists, "checkpoint directory " + dir.string() + " is in use by another averager" +
                                            (pid.empty() ? std::string{} : " (pid " + pid + ")"));
    }
    return fail(errc::io_error, "cannot lock " + lock_path.string() + ": " + std::strerror(err));
  }
  // Record the holder for the message a second averager prints; the lock itself is the flock.
  const auto pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    PRSGD_LOG(warn, checkpoint_log) << "cannot record the pid in " << lock_path.string() << ": "
                                    << std::strerror(errno);
  }
  return file_checkpoint_store{std::move(dir), fd};
}

file_checkpoint_store::~file_checkpoint_store() {
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);  // releases the flock
  }
}

expected<std::filesystem::path> file_checkpoint_store::set_aside() {
  const auto all = files();
  if (all.empty()) {
    return std::filesystem::path{};
  }
  std::error_code ec;
  std::filesystem::path target;
  for (int n = 1;; ++n) {
    target = dir_ / ("replaced-" + std::to_string(n));
    if (!std::filesystem::exists(target, ec)) {
      break;
    }
  }
  std::filesystem::create_directory(target, ec);
  if (ec) {
    return fail(errc::io_error, "cannot create " + target.string() + ": " + ec.message());
  }
  for (const auto& f : all) {
    std::filesystem::rename(f, target / f.filename(), ec);
    if (ec) {
      return fail(errc::io_error, "cannot move " + f.string() + " to " + target.string() + ": " + ec.message());
    }
  }
  PRSGD_LOG(info, checkpoint_log) << "moved " << all.size() << " checkpoints of the previous job to "
                                  << target.string();
  return target;
}

expected<file_checkpoint_store> file_checkpoint_store::open(std::filesystem::path dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return fail(errc::not_found, "no checkpoint directory " + dir.string());
  }
  return file_checkpoint_store{std::move(dir), -1};
}

std::filesystem::path file_checkpoint_store::path_of(round_t round) const { return dir_ / file_name(round); }

std::vector<std::filesystem::path> file_checkpoint_store::files() const {
  std::vector<std::pair<std::uint64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it{dir_, ec}, end; !ec && it != end; it.increment(ec)) {
    std::uint64_t round = 0;
    if (it->is_regular_file() && parse_name(it->path().filename().string(), round)) {
      found.emplace_back(round, it->path());
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::filesystem::path> out;
  out.reserve(found.size());
  for (auto& [r, p] : found) {
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<round_t> file_checkpoint_store::list() const {
  std::vector<round_t> rounds;
  for (const auto& p : files()) {
    std::uint64_t round = 0;
    if (parse_name(p.filename().string(), round)) {
      rounds.push_back(round);
    }
  }
  return rounds;
}

expected<void> file_checkpoint_store::write(const checkpoint_state& s) {
  PRSGD_TRY(write_file_atomically(path_of(s.round), encode_checkpoint(s), 0600));
  PRSGD_LOG(info, checkpoint_log) << "saved round " << s.round << " to " << path_of(s.round).string();
  return {};
}

expected<void> file_checkpoint_store::prune(std::size_t keep) {
  const auto all = files();
  std::optional<error> first_failure;
  for (std::size_t i = std::max<std::size_t>(keep, 1); i < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i], ec);
    if (ec) {
      PRSGD_LOG(warn, checkpoint_log) << "cannot remove old checkpoint " << all[i].string() << ": " << ec.message();
      if (!first_failure) {
        first_failure = error{errc::io_error, "cannot remove " + all[i].string() + ": " + ec.message()};
      }
    }
  }
  if (first_failure) {
    return std::move(*first_failure);
  }
  return {};
}

std::optional<checkpoint_state> file_checkpoint_store::read_newest() const {
  for (const auto& path : files()) {
    bool ok = false;
    auto bytes = read_bytes(path, ok);
    if (!ok) {
      PRSGD_LOG(warn, checkpoint_log) << "cannot read " << path.string() << "; trying the previous checkpoint";
      continue;
    }
    auto s = decode_checkpoint(bytes);
    if (!s) {
      PRSGD_LOG(warn, checkpoint_log) << "skipping corrupt checkpoint " << path.string() << ": " << s.error().message()
                                      << "; trying the previous one";
      continue;
    }
    return std::move(s).value();
  }
  return std::nullopt;
}

expected<incarnation_t> file_checkpoint_store::next_incarnation() {
  incarnation_t highest = 0;
  const auto path = dir_ / "incarnation";
  {
    std::ifstream in{path};
    std::uint64_t v = 0;
    if (in >> v) {
      highest = v;
    }
  }
  // The file may be lost while checkpoints survive; never go below what they record.
  for (const auto& f : files()) {
    bool ok = false;
    auto bytes = read_bytes(f, ok);
    if (auto s = decode_checkpoint(bytes)) {
      highest = std::max(highest, s->averager_incarnation);
    }
  }
  const incarnation_t next = highest + 1;
  const auto text = std::to_string(next) + "\n";
  PRSGD_TRY(write_file_atomically(path, std::vector<unsigned char>(text.begin(), text.end()), 0600));
  return next;
}

}  // namespace prsgd::actors
