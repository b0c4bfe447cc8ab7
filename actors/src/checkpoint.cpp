// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/checkpoint.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

namespace prsgd::actors {

namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints are written little-endian");

constexpr std::array<char, 8> magic{'P', 'R', 'S', 'G', 'D', 'C', 'K', 'P'};
// Version 2 appends the model identity to version 1's payload, version 3 the `finished` flag, version 4
// the sample pool; version 5 has version 4's layout, its pool ranges being positions of each epoch's
// permutation instead of sample indices. Versions 1 to 4 are still read.
constexpr std::uint32_t format_version = 5;
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
  p.put<std::uint8_t>(s.finished ? 1 : 0);
  p.put<std::uint8_t>(s.pool ? 1 : 0);
  if (s.pool) {
    p.put<std::uint64_t>(s.pool->next_epoch);
    p.put<std::uint64_t>(s.pool->epochs_done);
    p.put<std::uint64_t>(s.pool->open.size());
    for (const auto& e : s.pool->open) {
      p.put<std::uint64_t>(e.epoch);
      p.put<std::uint64_t>(e.consumed);
      p.put<std::uint64_t>(e.available.size());
      for (const auto& [b, en] : e.available) {
        p.put<std::uint64_t>(b);
        p.put<std::uint64_t>(en);
      }
    }
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
  if (ok && version >= 3) {
    std::uint8_t finished = 0;
    ok = p.get(finished) && finished <= 1;
    s.finished = finished == 1;
  }
  if (ok && version >= 4) {
    std::uint8_t has_pool = 0;
    ok = p.get(has_pool) && has_pool <= 1;
    if (ok && has_pool == 1) {
      algorithms::pool_state pool;
      std::uint64_t open = 0;
      ok = p.get(pool.next_epoch) && p.get(pool.epochs_done) && p.get(open) && open <= size / 24;
      for (std::uint64_t i = 0; ok && i < open; ++i) {
        algorithms::pool_epoch e;
        std::uint64_t ranges = 0;
        ok = p.get(e.epoch) && p.get(e.consumed) && p.get(ranges) && ranges <= size / 16;
        for (std::uint64_t k = 0; ok && k < ranges; ++k) {
          std::uint64_t b = 0;
          std::uint64_t en = 0;
          ok = p.get(b) && p.get(en);
          e.available.emplace_back(b, en);
        }
        pool.open.push_back(std::move(e));
      }
      s.pool = std::move(pool);
      s.pool_in_storage_order = version == 4;
    }
  }
  ok = ok && p.at_end();
  if (!ok) {
    return fail(errc::decode_failed, "checkpoint payload is malformed");
  }
  // A checkpoint that passed its CRC can still hold NaN/Inf (written by a version that did not check x̄):
  // resuming from it would stall the job, so it counts as corrupt.
  const auto finite = [](const auto& v) {
    return std::all_of(v.begin(), v.end(), [](auto x) { return std::isfinite(x); });
  };
  if (!finite(s.model)) {
    return fail(errc::decode_failed, "checkpoint x̄ holds NaN or Inf");
  }
  if (!finite(s.outer_momentum)) {
    return fail(errc::decode_failed, "checkpoint momentum holds NaN or Inf");
  }
  return s;
}

}  // namespace prsgd::actors
