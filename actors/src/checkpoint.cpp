// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/checkpoint.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>

#include "prsgd/common/log.hpp"

namespace prsgd::actors {

namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints are written little-endian");

constexpr std::string_view log_component = "checkpoint";
constexpr std::array<char, 8> magic{'P', 'R', 'S', 'G', 'D', 'C', 'K', 'P'};
// Version 2 appends the model identity to version 1's payload; version 1 is still read.
constexpr std::uint32_t format_version = 2;
constexpr std::uint32_t oldest_readable_version = 1;
constexpr std::size_t header_size = 8 + 4 + 8 + 4;

// Appends plain little-endian values.
class writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& text) {
    put<std::uint64_t>(text.size());
    bytes.insert(bytes.end(), text.begin(), text.end());
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    put<std::uint64_t>(v.size());
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<unsigned char> bytes;
};

// Reads what `writer` wrote; every read is bounds-checked.
class reader {
 public:
  reader(const unsigned char* data, std::size_t size) : data_(data), size_(size) {}
  template <class T>
  bool get(T& v) {
    if (size_ - pos_ < sizeof(T)) {
      return false;
    }
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  template <class T>
  bool get_vector(std::vector<T>& v) {
    std::uint64_t n = 0;
    if (!get(n) || n > (size_ - pos_) / sizeof(T)) {
      return false;
    }
    v.resize(n);
    if (n > 0) {  // memcpy with an empty vector's null data() is undefined
      std::memcpy(v.data(), data_ + pos_, n * sizeof(T));
    }
    pos_ += n * sizeof(T);
    return true;
  }
  bool get_string(std::string& text) {
    std::uint64_t n = 0;
    if (!get(n) || n > size_ - pos_) {
      return false;
    }
    text.assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }
  [[nodiscard]] bool at_end() const { return pos_ == size_; }

 private:
  const unsigned char* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

std::uint32_t crc32_of(const unsigned char* data, std::size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(size, 1U << 30));
    crc = crc32(crc, data, chunk);
    data += chunk;
    size -= chunk;
  }
  return static_cast<std::uint32_t>(crc);
}

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

}  // namespace

std::vector<unsigned char> encode_checkpoint(const checkpoint_state& s) {
  writer p;
  p.put<std::uint64_t>(s.averager_incarnation);
  p.put<std::uint64_t>(s.round);
  p.put<std::uint64_t>(s.rounds_completed);
  p.put<std::uint64_t>(s.late);
  p.put<std::uint64_t>(s.duplicate);
  p.put<std::uint64_t>(s.rejected);
  p.put_vector(s.model);
  p.put<std::uint64_t>(s.members.size());
  for (const auto& m : s.members) {
    p.put<std::uint64_t>(m.member);
    p.put<std::uint64_t>(m.incarnation);
    p.put<std::uint64_t>(m.interval);
    p.put<double>(m.speed);
  }
  p.put_vector(s.outer_momentum);
  p.put_vector(s.arrival_history);
  p.put<std::uint8_t>(s.identity ? 1 : 0);
  if (s.identity) {
    const auto& id = *s.identity;
    p.put_string(id.name);
    p.put<std::int32_t>(id.channels);
    p.put<std::int32_t>(id.height);
    p.put<std::int32_t>(id.width);
    p.put<std::int32_t>(id.classes);
    p.put_string(id.dataset);
    p.put_string(id.fingerprint);
  }

  writer h;
  for (char c : magic) {
    h.put(c);
  }
  h.put<std::uint32_t>(format_version);
  h.put<std::uint64_t>(p.bytes.size());
  h.put<std::uint32_t>(crc32_of(p.bytes.data(), p.bytes.size()));
  h.bytes.insert(h.bytes.end(), p.bytes.begin(), p.bytes.end());
  return std::move(h.bytes);
}

expected<checkpoint_state> decode_checkpoint(const std::vector<unsigned char>& bytes) {
  if (bytes.size() < header_size) {
    return fail(errc::decode_failed, "checkpoint truncated: " + std::to_string(bytes.size()) + " bytes");
  }
  reader h{bytes.data(), header_size};
  std::array<char, 8> m{};
  for (char& c : m) {
    (void)h.get(c);
  }
  std::uint32_t version = 0;
  std::uint64_t size = 0;
  std::uint32_t crc = 0;
  (void)h.get(version);
  (void)h.get(size);
  (void)h.get(crc);
  if (m != magic) {
    return fail(errc::decode_failed, "not a prsgd checkpoint (bad magic)");
  }
  if (version < oldest_readable_version || version > format_version) {
    return fail(errc::decode_failed, "unsupported checkpoint version " + std::to_string(version));
  }
  if (size != bytes.size() - header_size) {
    return fail(errc::decode_failed, "checkpoint payload is " + std::to_string(bytes.size() - header_size) +
                                         " bytes, header says " + std::to_string(size));
  }
  if (crc32_of(bytes.data() + header_size, size) != crc) {
    return fail(errc::checksum_mismatch, "checkpoint CRC32 mismatch");
  }
  reader p{bytes.data() + header_size, size};
  checkpoint_state s;
  std::uint64_t members = 0;
  bool ok = p.get(s.averager_incarnation) && p.get(s.round) && p.get(s.rounds_completed) && p.get(s.late) &&
            p.get(s.duplicate) && p.get(s.rejected) && p.get_vector(s.model) && p.get(members);
  if (ok && members > size / 32) {
    ok = false;
  }
  for (std::uint64_t i = 0; ok && i < members; ++i) {
    checkpoint_member cm;
    ok = p.get(cm.member) && p.get(cm.incarnation) && p.get(cm.interval) && p.get(cm.speed);
    s.members.push_back(cm);
  }
  ok = ok && p.get_vector(s.outer_momentum) && p.get_vector(s.arrival_history);
  if (ok && version >= 2) {
    std::uint8_t has_identity = 0;
    ok = p.get(has_identity) && has_identity <= 1;
    if (ok && has_identity == 1) {
      checkpoint_model id;
      ok = p.get_string(id.name) && p.get(id.channels) && p.get(id.height) && p.get(id.width) && p.get(id.classes) &&
           p.get_string(id.dataset) && p.get_string(id.fingerprint);
      s.identity = std::move(id);
    }
  }
  ok = ok && p.at_end();
  if (!ok) {
    return fail(errc::decode_failed, "checkpoint payload is malformed");
  }
  return s;
}

checkpoint_store::checkpoint_store(std::filesystem::path dir, std::size_t keep)
    : dir_(std::move(dir)), keep_(std::max<std::size_t>(keep, 1)) {}

std::vector<std::filesystem::path> checkpoint_store::files() const {
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

expected<void> checkpoint_store::save(const checkpoint_state& s) {
  PRSGD_TRY(write_file_atomically(dir_ / file_name(s.round), encode_checkpoint(s)));
  const auto all = files();
  for (std::size_t i = keep_; i < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i], ec);
    if (ec) {
      PRSGD_LOG(warn, log_component) << "cannot remove old checkpoint " << all[i].string() << ": " << ec.message();
    }
  }
  PRSGD_LOG(info, log_component) << "saved round " << s.round << " to " << (dir_ / file_name(s.round)).string();
  return {};
}

std::optional<checkpoint_state> checkpoint_store::load_newest() const {
  for (const auto& path : files()) {
    std::ifstream in{path, std::ios::binary};
    std::vector<unsigned char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (!in.good() && !in.eof()) {
      PRSGD_LOG(warn, log_component) << "cannot read " << path.string() << "; trying the previous checkpoint";
      continue;
    }
    auto s = decode_checkpoint(bytes);
    if (!s) {
      PRSGD_LOG(warn, log_component) << "skipping corrupt checkpoint " << path.string() << ": "
                                     << s.error().message() << "; trying the previous one";
      continue;
    }
    return std::move(s).value();
  }
  return std::nullopt;
}

expected<incarnation_t> checkpoint_store::next_incarnation() {
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
    std::ifstream in{f, std::ios::binary};
    std::vector<unsigned char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (auto s = decode_checkpoint(bytes)) {
      highest = std::max(highest, s->averager_incarnation);
    }
  }
  const incarnation_t next = highest + 1;
  const auto text = std::to_string(next) + "\n";
  PRSGD_TRY(write_file_atomically(path, std::vector<unsigned char>(text.begin(), text.end())));
  return next;
}

}  // namespace prsgd::actors
