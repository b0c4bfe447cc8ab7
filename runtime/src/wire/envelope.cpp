// SPDX-License-Identifier: Apache-2.0
#include "prsgd/runtime/envelope.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <limits>

#include <msgpack.hpp>
#include <zlib.h>

namespace prsgd::wire {
namespace {

// Header keys (PROTOCOL.md, "Header fields"). Short on purpose: the header travels with every message.
constexpr std::string_view k_version = "v";
constexpr std::string_view k_type = "t";
constexpr std::string_view k_from = "f";
constexpr std::string_view k_to = "to";
constexpr std::string_view k_to_name = "tn";
constexpr std::string_view k_correlation = "c";
constexpr std::string_view k_method = "m";
constexpr std::string_view k_type_name = "ty";
constexpr std::string_view k_name = "n";
constexpr std::string_view k_node = "nd";
constexpr std::string_view k_endpoint = "ep";
constexpr std::string_view k_incarnation = "i";
constexpr std::string_view k_error_code = "ec";
constexpr std::string_view k_error_context = "ex";
constexpr std::string_view k_args = "a";
constexpr std::string_view k_payloads = "p";

constexpr std::size_t max_header_keys = 32;
constexpr std::uint8_t max_errc = static_cast<std::uint8_t>(errc::unsupported);

// Packs into a std::vector<std::byte>; msgpack's packer only needs write().
struct byte_sink {
  std::vector<std::byte>* out;
  void write(const char* data, std::size_t size) {
    const auto* p = reinterpret_cast<const std::byte*>(data);
    out->insert(out->end(), p, p + size);
  }
};
using packer = msgpack::packer<byte_sink>;

void pack_str(packer& pk, std::string_view s) {
  pk.pack_str(static_cast<std::uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}

void pack_address(packer& pk, const actor_address& a) {
  pk.pack_array(2);
  pack_str(pk, a.node);
  pk.pack_uint64(a.id);
}

bool is_set(const actor_address& a) { return !a.node.empty() || a.id != 0; }

// Rejects control characters so names can be logged verbatim.
expected<void> check_text(std::string_view what, std::string_view s, std::size_t max_bytes, bool required) {
  if (required && s.empty()) {
    return fail(errc::protocol_error, std::string{what} + " is required");
  }
  if (s.size() > max_bytes) {
    return fail(errc::protocol_error,
                std::string{what} + " is " + std::to_string(s.size()) + " bytes, limit " + std::to_string(max_bytes));
  }
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f) {
      return fail(errc::protocol_error, std::string{what} + " contains a control character");
    }
  }
  return {};
}

expected<void> check_address(std::string_view what, const actor_address& a, const limits& lim) {
  PRSGD_TRY(check_text(what, a.node, lim.max_node_bytes, false));
  if (a.node.empty() && a.id != 0) {
    return fail(errc::protocol_error, std::string{what} + " has an actor id but no node");
  }
  return {};
}

expected<void> require(bool ok, std::string_view what) {
  if (!ok) {
    return fail(errc::protocol_error, std::string{what});
  }
  return {};
}

expected<void> check_payload_meta(std::size_t index, const payload& p, std::uint64_t size, const limits& lim) {
  const std::string where = "payload " + std::to_string(index);
  if (size > lim.max_payload_bytes) {
    return fail(errc::too_large,
                where + " is " + std::to_string(size) + " bytes, limit " + std::to_string(lim.max_payload_bytes));
  }
  if (static_cast<std::uint8_t>(p.type) > max_dtype) {
    return fail(errc::protocol_error, where + " has an unknown dtype");
  }
  const std::uint64_t elem = element_size(p.type);
  if (size % elem != 0) {
    return fail(errc::protocol_error, where + " size is not a multiple of its element size");
  }
  if (p.shape.size() > lim.max_rank) {
    return fail(errc::protocol_error, where + " shape rank exceeds " + std::to_string(lim.max_rank));
  }
  if (!p.shape.empty()) {
    std::uint64_t count = 1;
    for (const std::uint64_t d : p.shape) {
      if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / d) {
        return fail(errc::protocol_error, where + " shape overflows");
      }
      count *= d;
    }
    if (count > std::numeric_limits<std::uint64_t>::max() / elem || count * elem != size) {
      return fail(errc::protocol_error, where + " shape does not match its size");
    }
  }
  return {};
}

// ---- decoding helpers: every accessor checks the msgpack type before reading. ----

expected<std::uint64_t> get_uint(const msgpack::object& o, std::string_view what) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) {
    return fail(errc::protocol_error, std::string{what} + " must be an unsigned integer");
  }
  return o.via.u64;
}

expected<std::string> get_str(const msgpack::object& o, std::string_view what) {
  if (o.type != msgpack::type::STR) {
    return fail(errc::protocol_error, std::string{what} + " must be a string");
  }
  return std::string(o.via.str.ptr, o.via.str.size);
}

expected<actor_address> get_address(const msgpack::object& o, std::string_view what) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size != 2) {
    return fail(errc::protocol_error, std::string{what} + " must be [node, id]");
  }
  auto node = get_str(o.via.array.ptr[0], what);
  PRSGD_TRY(node);
  auto id = get_uint(o.via.array.ptr[1], what);
  PRSGD_TRY(id);
  return actor_address{std::move(*node), *id};
}

expected<payload> get_payload_meta(const msgpack::object& o, std::uint64_t& size) {
  // [size, dtype, shape, crc32|nil]
  if (o.type != msgpack::type::ARRAY || o.via.array.size != 4) {
    return fail(errc::protocol_error, "payload descriptor must be [size, dtype, shape, crc32]");
  }
  const msgpack::object* f = o.via.array.ptr;
  auto sz = get_uint(f[0], "payload size");
  PRSGD_TRY(sz);
  auto dt = get_uint(f[1], "payload dtype");
  PRSGD_TRY(dt);
  if (*dt > max_dtype) {
    return fail(errc::protocol_error, "payload dtype " + std::to_string(*dt) + " is unknown");
  }
  payload p;
  p.type = static_cast<dtype>(*dt);
  if (f[2].type != msgpack::type::ARRAY) {
    return fail(errc::protocol_error, "payload shape must be an array");
  }
  p.shape.reserve(f[2].via.array.size);
  for (std::uint32_t i = 0; i < f[2].via.array.size; ++i) {
    auto d = get_uint(f[2].via.array.ptr[i], "payload shape");
    PRSGD_TRY(d);
    p.shape.push_back(*d);
  }
  if (f[3].type != msgpack::type::NIL) {
    auto crc = get_uint(f[3], "payload crc32");
    PRSGD_TRY(crc);
    if (*crc > std::numeric_limits<std::uint32_t>::max()) {
      return fail(errc::protocol_error, "payload crc32 exceeds 32 bits");
    }
    p.crc32 = static_cast<std::uint32_t>(*crc);
  }
  size = *sz;
  return p;
}

struct decoded_header {
  header hdr;
  std::vector<payload> payloads;
  std::vector<std::uint64_t> sizes;
};

expected<decoded_header> parse_header(const msgpack::object& root, const limits& lim) {
  if (root.type != msgpack::type::MAP) {
    return fail(errc::protocol_error, "header must be a msgpack map");
  }
  decoded_header out;
  header& h = out.hdr;
  bool have_version = false;
  bool have_type = false;
  std::uint32_t seen = 0;  // bit per known key, to reject duplicates
  const auto mark = [&seen](int bit) -> expected<void> {
    if ((seen & (1U << bit)) != 0) {
      return fail(errc::protocol_error, "duplicate header key");
    }
    seen |= 1U << bit;
    return {};
  };
  for (std::uint32_t i = 0; i < root.via.map.size; ++i) {
    const msgpack::object& key = root.via.map.ptr[i].key;
    const msgpack::object& val = root.via.map.ptr[i].val;
    if (key.type != msgpack::type::STR) {
      return fail(errc::protocol_error, "header keys must be strings");
    }
    const std::string_view k(key.via.str.ptr, key.via.str.size);
    if (k == k_version) {
      PRSGD_TRY(mark(0));
      auto v = get_uint(val, "version");
      PRSGD_TRY(v);
      if (*v != protocol_version) {
        return fail(errc::protocol_error, "unsupported protocol version " + std::to_string(*v) + " (this node speaks " +
                                              std::to_string(protocol_version) + ")");
      }
      h.version = protocol_version;
      have_version = true;
    } else if (k == k_type) {
      PRSGD_TRY(mark(1));
      auto t = get_uint(val, "type");
      PRSGD_TRY(t);
      if (*t == 0 || *t > max_message_type) {
        return fail(errc::protocol_error, "unknown message type " + std::to_string(*t));
      }
      h.type = static_cast<message_type>(*t);
      have_type = true;
    } else if (k == k_from) {
      PRSGD_TRY(mark(2));
      auto a = get_address(val, "from");
      PRSGD_TRY(a);
      h.from = std::move(*a);
    } else if (k == k_to) {
      PRSGD_TRY(mark(3));
      auto a = get_address(val, "to");
      PRSGD_TRY(a);
      h.to = std::move(*a);
    } else if (k == k_to_name) {
      PRSGD_TRY(mark(4));
      auto s = get_str(val, "to_name");
      PRSGD_TRY(s);
      h.to_name = std::move(*s);
    } else if (k == k_correlation) {
      PRSGD_TRY(mark(5));
      auto v = get_uint(val, "correlation_id");
      PRSGD_TRY(v);
      h.correlation_id = *v;
    } else if (k == k_method) {
      PRSGD_TRY(mark(6));
      auto s = get_str(val, "method");
      PRSGD_TRY(s);
      h.method = std::move(*s);
    } else if (k == k_type_name) {
      PRSGD_TRY(mark(7));
      auto s = get_str(val, "type_name");
      PRSGD_TRY(s);
      h.type_name = std::move(*s);
    } else if (k == k_name) {
      PRSGD_TRY(mark(8));
      auto s = get_str(val, "name");
      PRSGD_TRY(s);
      h.name = std::move(*s);
    } else if (k == k_node) {
      PRSGD_TRY(mark(9));
      auto s = get_str(val, "node");
      PRSGD_TRY(s);
      h.node = std::move(*s);
    } else if (k == k_endpoint) {
      PRSGD_TRY(mark(10));
      auto s = get_str(val, "endpoint");
      PRSGD_TRY(s);
      h.endpoint = std::move(*s);
    } else if (k == k_incarnation) {
      PRSGD_TRY(mark(11));
      auto v = get_uint(val, "incarnation");
      PRSGD_TRY(v);
      h.incarnation = *v;
    } else if (k == k_error_code) {
      PRSGD_TRY(mark(12));
      auto v = get_uint(val, "error_code");
      PRSGD_TRY(v);
      if (*v > max_errc) {
        return fail(errc::protocol_error, "unknown error code " + std::to_string(*v));
      }
      h.error_code = static_cast<errc>(*v);
    } else if (k == k_error_context) {
      PRSGD_TRY(mark(13));
      auto s = get_str(val, "error_context");
      PRSGD_TRY(s);
      h.error_context = std::move(*s);
    } else if (k == k_args) {
      PRSGD_TRY(mark(14));
      if (val.type != msgpack::type::BIN) {
        return fail(errc::protocol_error, "args must be binary");
      }
      const auto* p = reinterpret_cast<const std::byte*>(val.via.bin.ptr);
      h.args.assign(p, p + val.via.bin.size);
    } else if (k == k_payloads) {
      PRSGD_TRY(mark(15));
      if (val.type != msgpack::type::ARRAY) {
        return fail(errc::protocol_error, "payloads must be an array");
      }
      if (val.via.array.size > lim.max_payloads) {
        return fail(errc::protocol_error, "header declares " + std::to_string(val.via.array.size) +
                                              " payloads, limit " + std::to_string(lim.max_payloads));
      }
      out.payloads.reserve(val.via.array.size);
      out.sizes.reserve(val.via.array.size);
      for (std::uint32_t j = 0; j < val.via.array.size; ++j) {
        std::uint64_t size = 0;
        auto p = get_payload_meta(val.via.array.ptr[j], size);
        PRSGD_TRY(p);
        out.payloads.push_back(std::move(*p));
        out.sizes.push_back(size);
      }
    }
    // Unknown keys are ignored so a minor extension does not need a version bump (PROTOCOL.md).
  }
  if (!have_version) {
    return fail(errc::protocol_error, "header has no version");
  }
  if (!have_type) {
    return fail(errc::protocol_error, "header has no type");
  }
  return out;
}

}  // namespace

std::string_view to_string(message_type t) noexcept {
  switch (t) {
    case message_type::tell: return "tell";
    case message_type::ask: return "ask";
    case message_type::reply: return "reply";
    case message_type::error: return "error";
    case message_type::spawn: return "spawn";
    case message_type::monitor: return "monitor";
    case message_type::demonitor: return "demonitor";
    case message_type::down: return "down";
    case message_type::heartbeat: return "heartbeat";
    case message_type::register_node: return "register_node";
    case message_type::register_name: return "register_name";
    case message_type::lookup: return "lookup";
    case message_type::node_down: return "node_down";
    case message_type::leave: return "leave";
  }
  return "unknown";
}

std::size_t element_size(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
    case dtype::i32:
    case dtype::u32: return 4;
    case dtype::f64:
    case dtype::i64:
    case dtype::u64: return 8;
    case dtype::bytes:
    case dtype::u8:
    case dtype::msgpack: return 1;
  }
  return 1;
}

std::uint32_t crc32(std::span<const std::byte> bytes) noexcept {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  std::size_t left = bytes.size();
  constexpr std::size_t chunk = std::size_t{1} << 30;  // zlib takes a 32-bit length
  while (left > 0) {
    const std::size_t n = std::min(left, chunk);
    crc = ::crc32(crc, p, static_cast<uInt>(n));
    p += n;
    left -= n;
  }
  return static_cast<std::uint32_t>(crc);
}

expected<void> validate(const header& h, const limits& lim) {
  if (h.version != protocol_version) {
    return fail(errc::protocol_error, "unsupported protocol version " + std::to_string(h.version));
  }
  const auto t = static_cast<std::uint8_t>(h.type);
  if (t == 0 || t > max_message_type) {
    return fail(errc::protocol_error, "unknown message type " + std::to_string(t));
  }
  PRSGD_TRY(check_address("from", h.from, lim));
  PRSGD_TRY(check_address("to", h.to, lim));
  PRSGD_TRY(check_text("to_name", h.to_name, lim.max_name_bytes, false));
  PRSGD_TRY(check_text("method", h.method, lim.max_name_bytes, false));
  PRSGD_TRY(check_text("type_name", h.type_name, lim.max_name_bytes, false));
  PRSGD_TRY(check_text("name", h.name, lim.max_name_bytes, false));
  PRSGD_TRY(check_text("node", h.node, lim.max_node_bytes, false));
  PRSGD_TRY(check_text("endpoint", h.endpoint, lim.max_endpoint_bytes, false));
  if (h.error_context.size() > lim.max_context_bytes) {
    return fail(errc::protocol_error, "error_context exceeds " + std::to_string(lim.max_context_bytes) + " bytes");
  }
  if (static_cast<std::uint8_t>(h.error_code) > max_errc) {
    return fail(errc::protocol_error, "unknown error code");
  }
  if (h.to.valid() && !h.to_name.empty()) {
    return fail(errc::protocol_error, "to and to_name are mutually exclusive");
  }
  const bool has_target = h.to.valid() || !h.to_name.empty();
  const std::string ty{to_string(h.type)};
  switch (h.type) {
    case message_type::tell:
      PRSGD_TRY(require(has_target, ty + " needs to or to_name"));
      PRSGD_TRY(require(!h.method.empty(), ty + " needs a method"));
      break;
    case message_type::ask:
      PRSGD_TRY(require(has_target, ty + " needs to or to_name"));
      PRSGD_TRY(require(!h.method.empty(), ty + " needs a method"));
      PRSGD_TRY(require(h.correlation_id != 0, ty + " needs a correlation id"));
      break;
    case message_type::reply: PRSGD_TRY(require(h.correlation_id != 0, ty + " needs a correlation id")); break;
    case message_type::error:
      PRSGD_TRY(require(h.correlation_id != 0, ty + " needs a correlation id"));
      PRSGD_TRY(require(h.error_code != errc::none, ty + " needs an error code"));
      break;
    case message_type::spawn:
      PRSGD_TRY(require(h.correlation_id != 0, ty + " needs a correlation id"));
      PRSGD_TRY(require(!h.type_name.empty(), ty + " needs a type_name"));
      PRSGD_TRY(require(!h.node.empty(), ty + " needs a target node"));
      break;
    case message_type::monitor:
    case message_type::demonitor:
    case message_type::down:
      PRSGD_TRY(require(h.from.valid(), ty + " needs a from actor"));
      PRSGD_TRY(require(h.to.valid(), ty + " needs a to actor"));
      break;
    case message_type::heartbeat:
    case message_type::node_down:
    case message_type::leave: PRSGD_TRY(require(!h.node.empty(), ty + " needs a node")); break;
    case message_type::register_node:
      PRSGD_TRY(require(h.correlation_id != 0, ty + " needs a correlation id"));
      PRSGD_TRY(require(!h.node.empty(), ty + " needs a node"));
      PRSGD_TRY(require(!h.endpoint.empty(), ty + " needs an endpoint"));
      break;
    case message_type::register_name:
      PRSGD_TRY(require(h.correlation_id != 0, ty + " needs a correlation id"));
      PRSGD_TRY(require(!h.name.empty(), ty + " needs a name"));
      PRSGD_TRY(require(h.from.valid(), ty + " needs a from actor"));
      break;
    case message_type::lookup: PRSGD_TRY(require(h.correlation_id != 0, ty + " needs a correlation id")); break;
  }
  return {};
}

expected<buffer> encode_header(const envelope& env, const limits& lim) {
  const header& h = env.hdr;
  PRSGD_TRY(validate(h, lim));
  if (env.payloads.size() > lim.max_payloads) {
    return fail(errc::too_large, "too many payloads: " + std::to_string(env.payloads.size()));
  }
  for (std::size_t i = 0; i < env.payloads.size(); ++i) {
    PRSGD_TRY(check_payload_meta(i, env.payloads[i], env.payloads[i].data.size(), lim));
  }
  std::vector<std::byte> bytes;
  bytes.reserve(128 + h.args.size() + 24 * env.payloads.size());
  byte_sink sink{&bytes};
  packer pk(sink);
  std::uint32_t n = 2;  // version, type
  n += is_set(h.from) ? 1 : 0;
  n += is_set(h.to) ? 1 : 0;
  n += h.to_name.empty() ? 0 : 1;
  n += h.correlation_id == 0 ? 0 : 1;
  n += h.method.empty() ? 0 : 1;
  n += h.type_name.empty() ? 0 : 1;
  n += h.name.empty() ? 0 : 1;
  n += h.node.empty() ? 0 : 1;
  n += h.endpoint.empty() ? 0 : 1;
  n += h.incarnation == 0 ? 0 : 1;
  n += h.error_code == errc::none ? 0 : 1;
  n += h.error_context.empty() ? 0 : 1;
  n += h.args.empty() ? 0 : 1;
  n += env.payloads.empty() ? 0 : 1;
  pk.pack_map(n);
  pack_str(pk, k_version);
  pk.pack_uint32(h.version);
  pack_str(pk, k_type);
  pk.pack_uint8(static_cast<std::uint8_t>(h.type));
  if (is_set(h.from)) {
    pack_str(pk, k_from);
    pack_address(pk, h.from);
  }
  if (is_set(h.to)) {
    pack_str(pk, k_to);
    pack_address(pk, h.to);
  }
  const auto str_field = [&pk](std::string_view key, const std::string& value) {
    if (!value.empty()) {
      pack_str(pk, key);
      pack_str(pk, value);
    }
  };
  str_field(k_to_name, h.to_name);
  if (h.correlation_id != 0) {
    pack_str(pk, k_correlation);
    pk.pack_uint64(h.correlation_id);
  }
  str_field(k_method, h.method);
  str_field(k_type_name, h.type_name);
  str_field(k_name, h.name);
  str_field(k_node, h.node);
  str_field(k_endpoint, h.endpoint);
  if (h.incarnation != 0) {
    pack_str(pk, k_incarnation);
    pk.pack_uint64(h.incarnation);
  }
  if (h.error_code != errc::none) {
    pack_str(pk, k_error_code);
    pk.pack_uint8(static_cast<std::uint8_t>(h.error_code));
  }
  str_field(k_error_context, h.error_context);
  if (!h.args.empty()) {
    if (h.args.size() > lim.max_header_bytes) {
      return fail(errc::too_large, "args are " + std::to_string(h.args.size()) + " bytes, header limit " +
                                       std::to_string(lim.max_header_bytes));
    }
    pack_str(pk, k_args);
    pk.pack_bin(static_cast<std::uint32_t>(h.args.size()));
    pk.pack_bin_body(reinterpret_cast<const char*>(h.args.data()), static_cast<std::uint32_t>(h.args.size()));
  }
  if (!env.payloads.empty()) {
    pack_str(pk, k_payloads);
    pk.pack_array(static_cast<std::uint32_t>(env.payloads.size()));
    for (const payload& p : env.payloads) {
      pk.pack_array(4);
      pk.pack_uint64(p.data.size());
      pk.pack_uint8(static_cast<std::uint8_t>(p.type));
      pk.pack_array(static_cast<std::uint32_t>(p.shape.size()));
      for (const std::uint64_t d : p.shape) {
        pk.pack_uint64(d);
      }
      if (p.crc32) {
        pk.pack_uint32(*p.crc32);
      } else {
        pk.pack_nil();
      }
    }
  }
  if (bytes.size() > lim.max_header_bytes) {
    return fail(errc::too_large,
                "header is " + std::to_string(bytes.size()) + " bytes, limit " + std::to_string(lim.max_header_bytes));
  }
  return frame::take(std::move(bytes));
}

expected<multipart> encode(const envelope& env, const limits& lim) {
  auto head = encode_header(env, lim);
  PRSGD_TRY(head);
  std::uint64_t total = head->size();
  multipart frames;
  frames.reserve(1 + env.payloads.size());
  frames.push_back(std::move(*head));
  for (const payload& p : env.payloads) {
    total += p.data.size();
    frames.push_back(p.data);
  }
  if (total > lim.max_total_bytes) {
    return fail(errc::too_large,
                "message is " + std::to_string(total) + " bytes, limit " + std::to_string(lim.max_total_bytes));
  }
  return frames;
}

std::optional<std::pair<message_type, std::uint64_t>> peek_request(const buffer& head, const limits& lim) {
  if (head.size() == 0 || head.size() > lim.max_header_bytes) {
    return std::nullopt;
  }
  try {
    const msgpack::unpack_limit ulim(lim.max_payloads, max_header_keys, lim.max_context_bytes, lim.max_header_bytes, 0,
                                     4);
    const msgpack::object_handle oh =
        msgpack::unpack(reinterpret_cast<const char*>(head.data()), head.size(), nullptr, nullptr, ulim);
    const msgpack::object& root = oh.get();
    if (root.type != msgpack::type::MAP) {
      return std::nullopt;
    }
    std::uint64_t type = 0;
    std::uint64_t cid = 0;
    for (std::uint32_t i = 0; i < root.via.map.size; ++i) {
      const msgpack::object& key = root.via.map.ptr[i].key;
      const msgpack::object& val = root.via.map.ptr[i].val;
      if (key.type != msgpack::type::STR || val.type != msgpack::type::POSITIVE_INTEGER) {
        continue;
      }
      const std::string_view k(key.via.str.ptr, key.via.str.size);
      if (k == k_type) {
        type = val.via.u64;
      } else if (k == k_correlation) {
        cid = val.via.u64;
      }
    }
    if (type == 0 || type > max_message_type || cid == 0) {
      return std::nullopt;
    }
    return std::pair{static_cast<message_type>(type), cid};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

expected<envelope> decode(std::span<const buffer> frames, const limits& lim) {
  if (frames.empty()) {
    return fail(errc::protocol_error, "message has no frames");
  }
  if (frames.size() - 1 > lim.max_payloads) {
    return fail(errc::too_large, "message has " + std::to_string(frames.size() - 1) + " payload frames, limit " +
                                     std::to_string(lim.max_payloads));
  }
  const buffer& head = frames[0];
  if (head.size() == 0) {
    return fail(errc::protocol_error, "empty header frame");
  }
  if (head.size() > lim.max_header_bytes) {
    return fail(errc::too_large,
                "header is " + std::to_string(head.size()) + " bytes, limit " + std::to_string(lim.max_header_bytes));
  }
  std::uint64_t total = head.size();
  for (std::size_t i = 1; i < frames.size(); ++i) {
    if (frames[i].size() > lim.max_payload_bytes) {
      return fail(errc::too_large, "payload frame " + std::to_string(i - 1) + " exceeds the size limit");
    }
    total += frames[i].size();
  }
  if (total > lim.max_total_bytes) {
    return fail(errc::too_large,
                "message is " + std::to_string(total) + " bytes, limit " + std::to_string(lim.max_total_bytes));
  }

  // Bounds on the msgpack object tree keep a hostile header from allocating much: no array may be
  // longer than the payload limit (or an address/descriptor), no string longer than the longest
  // field, no bin longer than the header, no ext at all, and no nesting deeper than the schema.
  const std::size_t max_array = std::max<std::size_t>(lim.max_payloads, std::max<std::size_t>(lim.max_rank, 4));
  const std::size_t max_str =
      std::max({lim.max_name_bytes, lim.max_node_bytes, lim.max_endpoint_bytes, lim.max_context_bytes});
  const msgpack::unpack_limit ulim(max_array, max_header_keys, max_str, lim.max_header_bytes, 0, 4);
  decoded_header parsed;
  try {
    std::size_t offset = 0;
    // The parsed tree only lives until parse_header copied it out; a zone sized for a typical header
    // avoids msgpack's default 8 KiB chunk (a large-bin malloc per message). It grows if needed.
    msgpack::zone zone(std::clamp<std::size_t>(head.size() * 4, 512, 8192));
    const msgpack::object root =
        msgpack::unpack(zone, reinterpret_cast<const char*>(head.data()), head.size(), offset, nullptr, nullptr, ulim);
    if (offset != head.size()) {
      return fail(errc::protocol_error, "header frame has " + std::to_string(head.size() - offset) + " trailing bytes");
    }
    auto p = parse_header(root, lim);
    PRSGD_TRY(p);
    parsed = std::move(*p);
  } catch (const std::bad_alloc&) {
    return fail(errc::decode_failed, "header: out of memory");
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, std::string{"header: "} + e.what());
  }

  PRSGD_TRY(validate(parsed.hdr, lim));
  if (parsed.payloads.size() != frames.size() - 1) {
    return fail(errc::protocol_error, "header declares " + std::to_string(parsed.payloads.size()) +
                                          " payloads but the message has " + std::to_string(frames.size() - 1));
  }
  envelope env;
  env.hdr = std::move(parsed.hdr);
  env.payloads = std::move(parsed.payloads);
  for (std::size_t i = 0; i < env.payloads.size(); ++i) {
    const buffer& frame = frames[i + 1];
    if (parsed.sizes[i] != frame.size()) {
      return fail(errc::protocol_error, "payload " + std::to_string(i) + " declares " +
                                            std::to_string(parsed.sizes[i]) + " bytes but has " +
                                            std::to_string(frame.size()));
    }
    PRSGD_TRY(check_payload_meta(i, env.payloads[i], frame.size(), lim));
    if (lim.verify_checksums && env.payloads[i].crc32 && *env.payloads[i].crc32 != crc32(frame.bytes())) {
      return fail(errc::checksum_mismatch, "payload " + std::to_string(i) + " fails its crc32");
    }
    env.payloads[i].data = frame;
  }
  return env;
}

}  // namespace prsgd::wire
