// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/codec.hpp"

#include "prsgd/actors/payload_compression.hpp"

#include <msgpack.hpp>

#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace prsgd::actors {
namespace {

// Message type codes on the wire (actors/PROTOCOL.md). Never reuse a number.
enum class wire_type : std::uint8_t {
  join = 1,
  welcome = 2,
  leave = 3,
  heartbeat = 4,
  model = 5,
  restart = 6,
  removed = 7,
  stop = 8,
  refused = 9,
  status = 10,
  status_reply = 11,
  control = 12,
  control_reply = 13,
  evaluator_hello = 14,
  evaluate = 15,
  evaluation = 16,
  shard_hello = 17,
  shard_setup = 18,
  shard_round = 19,
  shard_slice = 20,
  shard_ack = 21,
  shard_average = 22,
  shard_report = 23,
  spec = 24,
  spec_reply = 25,
  shard_relay = 26,
};

// A STATUS_REPLY's payload (the msgpack job_status) is at most this long.
constexpr std::size_t max_status_bytes = std::size_t{4} << 20;
// Its lists (members, joiners, removed members) hold at most this many entries, its maps this many keys
// (job_status has 28 fields; newer senders may add some), nested this deep (status, list, entry, and one
// spare level). msgpack allocates an array's elements when it reads the array's length, before their
// bytes: without these limits a few bytes claiming 2^32 elements would ask for 128 GiB.
constexpr std::size_t max_status_list = 65536;
constexpr std::size_t max_status_keys = 256;
constexpr std::size_t max_status_depth = 4;

// msgpack strings in a header are at most 256 bytes (parse_header's unpack limit).
constexpr std::size_t max_header_string = 256;
// Arrays in a header hold at most this many elements (RESTART's `ranges`, and each [begin, end) pair).
constexpr std::size_t max_header_array = max_restart_ranges;
// The first chunk of the zone a header is decoded into.
constexpr std::size_t header_zone_bytes = 1024;

std::string clipped(const std::string& text) {
  return text.size() <= max_header_string ? text : text.substr(0, max_header_string);
}

// Packs the header as a msgpack map with short string keys.
class header_writer {
 public:
  header_writer(wire_type t, std::size_t fields) : pk_(buf_) {
    pk_.pack_map(static_cast<std::uint32_t>(fields + 2));
    put("v", protocol_version);
    put("t", static_cast<std::uint8_t>(t));
  }
  template <class V>
  void put(const char* key, const V& value) {
    pk_.pack(std::string_view{key});
    if constexpr (std::is_same_v<V, bool>) {
      if (value) {
        pk_.pack_true();
      } else {
        pk_.pack_false();
      }
    } else {
      pk_.pack(value);
    }
  }
  [[nodiscard]] frame finish() { return frame::copy(buf_.data(), buf_.size()); }

 private:
  msgpack::sbuffer buf_;
  msgpack::packer<msgpack::sbuffer> pk_;
};

template <class M>
void put_common(header_writer& w, const M& m) {
  w.put("m", m.member);
  w.put("i", m.incarnation);
  w.put("a", m.averager_incarnation);
  w.put("r", m.round);
}
constexpr std::size_t common_fields = 4;

frame payload_of(const flat_buffer& buf, algorithms::wire_dtype dtype = algorithms::wire_dtype::f32) {
  if (!buf) {
    return frame{};
  }
  if (dtype == algorithms::wire_dtype::f32) {
    return frame::share(buf);
  }
  return frame::take(algorithms::encode(*buf, dtype));
}

// Bytes per value of a payload in `dtype`: payload_compression compresses the top byte of each. An int8
// payload (1) is never compressed.
std::size_t value_width(algorithms::wire_dtype dtype) {
  switch (dtype) {
    case algorithms::wire_dtype::f32: return 4;
    case algorithms::wire_dtype::bf16:
    case algorithms::wire_dtype::f16: return 2;
    default: return 1;
  }
}

// The header's `z` of a compressed frame: the top byte plane through zstd, the others raw
// (payload_compression.hpp).
constexpr std::uint64_t zstd_planes = 1;

// A slice payload that travels compressed when `compress` asks for it and that comes out smaller; `z` says
// which way it went (0: as it is, zstd_planes: compressed).
struct slice_payload {
  frame bytes;
  std::uint64_t z = 0;
};

slice_payload payload_of(const flat_buffer& buf, algorithms::wire_dtype dtype, bool compress) {
  if (!buf || !compress || buf->empty() || value_width(dtype) == 1) {
    return {payload_of(buf, dtype)};
  }
  std::vector<std::byte> encoded;
  std::span<const std::byte> raw;
  if (dtype == algorithms::wire_dtype::f32) {
    raw = std::as_bytes(std::span<const float>{*buf});
  } else {
    encoded = algorithms::encode(*buf, dtype);
    raw = encoded;
  }
  if (auto packed = compress_payload(raw, value_width(dtype))) {
    return {frame::take(std::move(*packed)), zstd_planes};
  }
  return {encoded.empty() ? frame::share(buf) : frame::take(std::move(encoded))};
}

std::string dtype_name(algorithms::wire_dtype dtype) { return std::string{algorithms::to_string(dtype)}; }

// Reads fields from a decoded header map; every getter validates type and presence. Looks keys up by a
// linear scan of the map (headers have a dozen keys, a status entry a few dozen): no copies, no allocation.
// When a key repeats, the first occurrence counts.
class header_reader {
 public:
  explicit header_reader(const msgpack::object& map) : map_(map.via.map) {
    for (std::uint32_t i = 0; i < map_.size; ++i) {
      if (map_.ptr[i].key.type != msgpack::type::STR) {
        throw std::runtime_error("header key is not a string");
      }
    }
  }
  template <class T>
  T get(const char* key) const {
    const msgpack::object* v = find(key);
    if (v == nullptr) {
      throw std::runtime_error(std::string{"missing header field '"} + key + "'");
    }
    return v->as<T>();
  }
  [[nodiscard]] const msgpack::object* find(const char* key) const {
    const std::string_view k{key};
    for (std::uint32_t i = 0; i < map_.size; ++i) {
      const auto& kv = map_.ptr[i];
      if (std::string_view{kv.key.via.str.ptr, kv.key.via.str.size} == k) {
        return &kv.val;
      }
    }
    return nullptr;
  }
  template <class T>
  T get_or(const char* key, T fallback) const {
    const msgpack::object* v = find(key);
    return v == nullptr ? fallback : v->as<T>();
  }

 private:
  msgpack::object_map map_;
};

template <class M>
void get_common(const header_reader& r, M& m) {
  m.member = r.get<member_id>("m");
  m.incarnation = r.get<incarnation_t>("i");
  m.averager_incarnation = r.get<incarnation_t>("a");
  m.round = r.get<round_t>("r");
}

// Reads an optional dtype field (absent: f32); an unknown name is decode_failed.
algorithms::wire_dtype get_dtype(const header_reader& r, const char* key) {
  const auto name = r.get_or<std::string>(key, "f32");
  auto d = algorithms::parse_wire_dtype(name);
  if (!d) {
    throw std::range_error(d.error().message());
  }
  return *d;
}

training_mode get_mode(const header_reader& r) {
  const auto md = r.get<std::uint8_t>("md");
  if (md > static_cast<std::uint8_t>(training_mode::minibatch_sgd)) {
    throw std::range_error("unknown training mode " + std::to_string(md));
  }
  return static_cast<training_mode>(md);
}

struct parsed_header {
  msgpack::object_handle handle;
  wire_type type{};
};

expected<parsed_header> parse_header(const multipart& msg, const codec_limits& limits) {
  if (msg.empty() || msg.size() > 2) {
    return fail(errc::protocol_error, "expected 1 or 2 frames, got " + std::to_string(msg.size()));
  }
  const frame& h = msg.front();
  if (h.size() == 0 || h.size() > limits.max_header_bytes) {
    return fail(errc::protocol_error, "header frame of " + std::to_string(h.size()) + " bytes (limit " +
                                          std::to_string(limits.max_header_bytes) + ")");
  }
  parsed_header out;
  try {
    // Bounded unpacking: no array, map or string in a header can make msgpack allocate much. The zone
    // starts at 1 KiB (a header's objects fit; it grows when not) instead of msgpack's 8 KiB default.
    auto zone = std::make_unique<msgpack::zone>(header_zone_bytes);
    std::size_t offset = 0;
    const msgpack::object obj =
        msgpack::unpack(*zone, reinterpret_cast<const char*>(h.data()), h.size(), offset, nullptr, nullptr,
                        msgpack::unpack_limit(max_header_array, 64, 256, 256, 16, 4));
    out.handle = msgpack::object_handle(obj, std::move(zone));
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, std::string{"header is not msgpack: "} + e.what());
  }
  const msgpack::object& obj = out.handle.get();
  if (obj.type != msgpack::type::MAP) {
    return fail(errc::decode_failed, "header is not a msgpack map");
  }
  try {
    header_reader r{obj};
    const auto v = r.get<std::uint32_t>("v");
    if (v != protocol_version) {
      return fail(errc::protocol_error,
                  "protocol version " + std::to_string(v) + ", this build speaks " + std::to_string(protocol_version));
    }
    const auto t = r.get<std::uint8_t>("t");
    if (t < 1 || t > static_cast<std::uint8_t>(wire_type::shard_relay)) {
      return fail(errc::protocol_error, "unknown message type " + std::to_string(t));
    }
    out.type = static_cast<wire_type>(t);
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, e.what());
  }
  return out;
}

// Decodes frame 1 (`declared` values sent as `dtype`) into a fresh float buffer after checking its size.
expected<flat_buffer> read_payload(const multipart& msg, std::uint64_t declared, const codec_limits& limits,
                                   algorithms::wire_dtype dtype = algorithms::wire_dtype::f32, std::uint64_t z = 0) {
  if (declared > limits.max_model_floats) {
    return fail(errc::too_large, "model of " + std::to_string(declared) + " floats exceeds the limit of " +
                                     std::to_string(limits.max_model_floats));
  }
  if (msg.size() != 2) {
    return fail(errc::protocol_error, "header declares a payload but the message has no payload frame");
  }
  const std::size_t expected_bytes = algorithms::encoded_size(dtype, declared);
  // A compressed frame (`z`) is restored to exactly the bytes the header declares, then read as sent raw.
  std::vector<std::byte> restored;
  std::span<const std::byte> p{reinterpret_cast<const std::byte*>(msg[1].data()), msg[1].size()};
  if (z == zstd_planes) {
    auto r = decompress_payload(p, value_width(dtype), expected_bytes);
    if (!r) {
      return std::move(r).error();
    }
    restored = std::move(*r);
    p = restored;
  } else if (z != 0) {
    return fail(errc::protocol_error, "payload compression " + std::to_string(z) + " is not one this build reads");
  }
  if (p.size() != expected_bytes) {
    return fail(errc::protocol_error, "payload has " + std::to_string(p.size()) + " bytes, header declares " +
                                          std::to_string(declared) + " values as " + dtype_name(dtype) + " (" +
                                          std::to_string(expected_bytes) + " bytes)");
  }
  auto buf = std::make_shared<std::vector<float>>(declared);
  if (dtype == algorithms::wire_dtype::f32) {
    if (declared > 0) {
      std::memcpy(buf->data(), p.data(), p.size());
    }
  } else {
    PRSGD_TRY(algorithms::decode(p, dtype, *buf));
  }
  return flat_buffer{std::move(buf)};
}

expected<void> expect_no_payload(const multipart& msg) {
  if (msg.size() != 1) {
    return fail(errc::protocol_error, "unexpected payload frame");
  }
  return {};
}

// Decodes one message for its recipient: parses the header, then `read(type, reader)` reads the fields of
// that type (a type the recipient is not sent comes back as not_for()). A field of the wrong type or out of
// range (header_reader and `read` throw) is decode_failed.
template <class Out, class Read>
expected<Out> decode_message(const multipart& msg, const codec_limits& limits, const Read& read) {
  auto parsed = parse_header(msg, limits);
  if (!parsed) {
    return std::move(parsed).error();
  }
  try {
    return read(parsed->type, header_reader{parsed->handle.get()});
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, e.what());
  }
}

// Reads a message that is its four common fields alone, without a payload (REMOVED, STOP, STATUS, SPEC).
template <class M>
expected<M> read_common_only(const multipart& msg, const header_reader& r) {
  PRSGD_TRY(expect_no_payload(msg));
  M m;
  get_common(r, m);
  return m;
}

// Reads a HEARTBEAT: the averager and its members send it each other.
expected<heartbeat_msg> read_heartbeat(const multipart& msg, const header_reader& r) {
  PRSGD_TRY(expect_no_payload(msg));
  heartbeat_msg m;
  get_common(r, m);
  m.from_averager = r.get<bool>("fa");
  m.token = r.get<session_token>("k");
  m.transfer_bytes = r.get_or<std::uint64_t>("tx", 0);
  return m;
}

// Returns a message read by one of the read_* functions above as one of the messages its recipient gets.
template <class Out, class M>
expected<Out> as_sent_to(expected<M> m) {
  if (!m) {
    return std::move(m).error();
  }
  return Out{std::move(*m)};
}

// Refuses a message type its recipient is not sent: "message type N <why>".
unexpected not_for(wire_type type, const char* why) {
  return fail(errc::protocol_error, "message type " + std::to_string(static_cast<int>(type)) + " " + why);
}

// One encoder per message type; the variant overloads below dispatch to them.
multipart encode_one(const welcome_msg& m) {
  header_writer w{wire_type::welcome, common_fields + 12 + (m.owners.empty() ? 0 : 1) + (m.upload_buffer == 0 ? 0 : 1) +
                                          (m.compress ? 1 : 0)};
  put_common(w, m);
  w.put("ad", m.admitted_round);
  w.put("md", static_cast<std::uint8_t>(m.mode));
  w.put("ms", m.model_size);
  w.put("hb", static_cast<std::int64_t>(m.heartbeat_interval.count()));
  w.put("k", m.token);
  w.put("sh", m.shard_index);
  w.put("ns", m.num_shards);
  w.put("mf", clipped(m.spec.model));
  w.put("df", clipped(m.spec.data));
  w.put("bs", m.spec.batch_size);
  w.put("sd", m.spec.seed);
  w.put("wd", dtype_name(m.spec.wire));
  if (!m.owners.empty()) {
    std::vector<std::string> owners;
    for (const auto& o : m.owners) {
      owners.push_back(clipped(o));
    }
    w.put("ow", owners);
  }
  if (m.upload_buffer != 0) {
    w.put("ub", m.upload_buffer);
  }
  if (m.compress) {
    w.put("wz", m.compress);
  }
  return {w.finish()};
}

multipart encode_one(const refused_msg& m) {
  header_writer w{wire_type::refused, common_fields + 1};
  put_common(w, m);
  w.put("why", clipped(m.reason));
  return {w.finish()};
}

multipart encode_one(const restart_msg& m) {
  header_writer w{wire_type::restart, common_fields + 6 + (m.base ? 1 : 0) + (m.held ? 1 : 0)};
  put_common(w, m);
  w.put("iv", m.interval);
  w.put("ranges", m.ranges);
  w.put("ss", m.step_size);
  w.put("md", static_cast<std::uint8_t>(m.mode));
  w.put("n", static_cast<std::uint64_t>(m.model ? m.model->size() : 0));
  w.put("wd", dtype_name(m.dtype));
  if (m.base) {
    w.put("wb", *m.base);
  }
  if (m.held) {
    w.put("hc", *m.held);
  }
  return {w.finish(), payload_of(m.model, m.dtype)};
}

multipart encode_one(const heartbeat_msg& m) {
  header_writer w{wire_type::heartbeat, common_fields + 3};
  put_common(w, m);
  w.put("fa", m.from_averager);
  w.put("k", m.token);
  w.put("tx", m.transfer_bytes);
  return {w.finish()};
}

multipart encode_one(const removed_msg& m) {
  header_writer w{wire_type::removed, common_fields};
  put_common(w, m);
  return {w.finish()};
}

multipart encode_one(const stop_msg& m) {
  header_writer w{wire_type::stop, common_fields};
  put_common(w, m);
  return {w.finish()};
}

multipart encode_one(const join_msg& m) {
  header_writer w{wire_type::join, common_fields + 6 + (m.initial_model ? 1 : 0) + (m.holds ? 1 : 0)};
  put_common(w, m);
  w.put("sc", m.sharding);
  w.put("wz", m.reads_compressed);
  if (m.holds) {
    w.put("hc", *m.holds);
  }
  w.put("s", m.speed_hint);
  w.put("mf", clipped(m.model_fingerprint));
  w.put("df", clipped(m.data_fingerprint));
  std::vector<std::string> dtypes;
  for (const auto d : m.wire_dtypes) {
    dtypes.push_back(dtype_name(d));
  }
  w.put("wds", dtypes);
  if (!m.initial_model) {
    return {w.finish()};
  }
  w.put("n", static_cast<std::uint64_t>(m.initial_model->size()));
  return {w.finish(), payload_of(m.initial_model)};
}

multipart encode_one(const evaluator_hello_msg& m) {
  header_writer w{wire_type::evaluator_hello, common_fields + 1};
  put_common(w, m);
  w.put("mf", clipped(m.model_fingerprint));
  return {w.finish()};
}

multipart encode_one(const evaluate_msg& m) {
  header_writer w{wire_type::evaluate, common_fields + 2};
  put_common(w, m);
  w.put("q", m.request);
  w.put("n", static_cast<std::uint64_t>(m.model ? m.model->size() : 0));
  return {w.finish(), payload_of(m.model)};
}

multipart encode_one(const evaluation_msg& m) {
  header_writer w{wire_type::evaluation, common_fields + (m.loss ? 3 : 2)};
  put_common(w, m);
  w.put("q", m.request);
  w.put("acc", m.accuracy);
  if (m.loss) {
    w.put("loss", *m.loss);
  }
  return {w.finish()};
}

multipart encode_one(const leave_msg& m) {
  header_writer w{wire_type::leave, common_fields + 1};
  put_common(w, m);
  w.put("k", m.token);
  return {w.finish()};
}

multipart encode_one(const model_msg& m) {
  header_writer w{wire_type::model, common_fields + 10 + (m.sliced ? 1 : 0)};
  put_common(w, m);
  if (m.sliced) {
    w.put("sl", true);
  }
  w.put("k", m.token);
  w.put("ct", m.cut);
  w.put("st", m.steps);
  w.put("sa", m.samples);
  w.put("ls", m.loss_sum);
  w.put("lc", m.loss_count);
  w.put("g", m.is_gradient);
  w.put("n", static_cast<std::uint64_t>(m.params ? m.params->size() : 0));
  w.put("wd", dtype_name(m.dtype));
  w.put("dl", m.delta);
  return {w.finish(), payload_of(m.params, m.dtype)};
}

// job_status <-> msgpack, field by field through each struct's `fields` list (a map per struct).
class status_packer {
 public:
  explicit status_packer(msgpack::packer<msgpack::sbuffer>& pk) : pk_(pk) {}
  template <class S>
  void object(const S& s) {
    std::uint32_t n = 0;
    S::fields(s, [&](std::string_view, const auto&) { ++n; });
    pk_.pack_map(n);
    S::fields(s, [&](std::string_view key, const auto& v) {
      pk_.pack(key);
      value(v);
    });
  }

 private:
  template <class V>
  void value(const V& v) {
    if constexpr (std::is_same_v<V, bool>) {
      if (v) {
        pk_.pack_true();
      } else {
        pk_.pack_false();
      }
    } else {
      pk_.pack(v);
    }
  }
  template <class S>
  void value(const std::vector<S>& v) {
    pk_.pack_array(static_cast<std::uint32_t>(v.size()));
    for (const auto& x : v) {
      object(x);
    }
  }
  msgpack::packer<msgpack::sbuffer>& pk_;
};

// Reads a struct from a msgpack map; missing keys keep their defaults (newer senders may add fields).
class status_unpacker {
 public:
  template <class S>
  static void object(const msgpack::object& o, S& s) {
    if (o.type != msgpack::type::MAP) {
      throw std::runtime_error("status: expected a map");
    }
    header_reader r{o};
    S::fields(s, [&](const char* key, auto& v) { value(r, key, v); });
  }

 private:
  template <class V>
  static void value(const header_reader& r, const char* key, V& v) {
    v = r.get_or<V>(key, v);
  }
  template <class S>
  static void value(const header_reader& r, const char* key, std::vector<S>& v) {
    const auto* o = r.find(key);
    if (o == nullptr) {
      return;
    }
    if (o->type != msgpack::type::ARRAY) {
      throw std::runtime_error(std::string{"status: "} + key + " is not an array");
    }
    v.resize(o->via.array.size);
    for (std::uint32_t i = 0; i < o->via.array.size; ++i) {
      object(o->via.array.ptr[i], v[i]);
    }
  }
};

multipart encode_one(const status_request_msg& m) {
  header_writer w{wire_type::status, common_fields};
  put_common(w, m);
  return {w.finish()};
}

multipart encode_one(const status_reply_msg& m) {
  header_writer w{wire_type::status_reply, common_fields};
  put_common(w, m);
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  status_packer{pk}.object(m.status ? *m.status : job_status{});
  return {w.finish(), frame::copy(buf.data(), buf.size())};
}

multipart encode_one(const control_msg& m) {
  header_writer w{wire_type::control, common_fields + 2};
  put_common(w, m);
  w.put("op", std::string{to_string(m.op)});
  w.put("arg", clipped(m.arg));
  return {w.finish()};
}

multipart encode_one(const control_reply_msg& m) {
  header_writer w{wire_type::control_reply, common_fields + 2};
  put_common(w, m);
  w.put("ok", m.ok);
  w.put("why", clipped(m.text));
  return {w.finish()};
}

// Sharded averaging (shard owners). Payload frames follow the same rule as RESTART and MODEL.
using shard_pairs = std::vector<std::tuple<std::uint64_t, std::uint64_t>>;
using shard_quads = std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>>;

std::uint64_t floats_in(const flat_buffer& b) { return b ? b->size() : 0; }

// Puts a slice payload's fields (`n`, `wd`, and `wb` for a change against x̄_base) and finishes the message.
multipart finish_with_payload(header_writer& w, const flat_buffer& model, algorithms::wire_dtype dtype,
                              const std::optional<round_t>& base, slice_payload payload) {
  w.put("n", floats_in(model));
  w.put("wd", dtype_name(dtype));
  if (base) {
    w.put("wb", *base);
  }
  if (payload.z != 0) {
    w.put("z", payload.z);
  }
  return {w.finish(), std::move(payload.bytes)};
}

multipart encode_one(const shard_hello_msg& m) {
  header_writer w{wire_type::shard_hello, common_fields + 5};
  w.put("m", std::uint64_t{0});
  w.put("i", m.incarnation);
  w.put("a", m.averager_incarnation);
  w.put("r", m.round);
  w.put("sk", m.shard);
  w.put("sn", m.shards);
  w.put("ep", clipped(m.endpoint));
  w.put("rd", m.ready);
  w.put("wz", m.reads_compressed);
  return {w.finish()};
}

multipart encode_one(const shard_setup_msg& m) {
  header_writer w{wire_type::shard_setup, common_fields + 7 + (m.ring ? 2 : 0) + (m.compress ? 1 : 0)};
  w.put("m", std::uint64_t{0});
  w.put("i", m.incarnation);
  w.put("a", m.averager_incarnation);
  w.put("r", m.round);
  w.put("sk", m.shard);
  w.put("sn", m.shards);
  w.put("of", m.offset);
  w.put("ms", m.model_size);
  w.put("hb", static_cast<std::int64_t>(m.heartbeat_interval.count()));
  w.put("wd", dtype_name(m.wire));
  if (m.ring) {
    w.put("rg", m.ring);
    w.put("rn", clipped(m.ring_next));
  }
  if (m.compress) {
    w.put("wz", m.compress);
  }
  w.put("n", floats_in(m.model));
  return {w.finish(), payload_of(m.model)};
}

multipart encode_one(const shard_round_msg& m) {
  header_writer w{wire_type::shard_round, common_fields + 7};
  w.put("m", std::uint64_t{0});
  w.put("i", std::uint64_t{0});
  w.put("a", m.averager_incarnation);
  w.put("r", m.round);
  w.put("cb", m.combine);
  shard_quads inputs;
  for (const auto& in : m.inputs) {
    inputs.emplace_back(in.member, in.token, in.samples, in.steps);
  }
  w.put("in", inputs);
  w.put("ru", m.rule);
  w.put("ag", m.aggregate);
  w.put("tr", m.trim);
  shard_pairs to;
  for (const auto& t : m.recipients) {
    to.emplace_back(t.member, t.token);
  }
  w.put("to", to);
  w.put("f", m.fetch);
  return {w.finish()};
}

multipart encode_one(const shard_slice_msg& m) {
  auto payload = payload_of(m.model, m.dtype, m.compressed);
  header_writer w{wire_type::shard_slice,
                  common_fields + 5 + (m.home ? 1 : 0) + (m.holds ? 1 : 0) + (payload.z != 0 ? 1 : 0)};
  w.put("m", m.member);
  w.put("i", std::uint64_t{0});
  w.put("a", std::uint64_t{0});
  w.put("r", m.round);
  w.put("k", m.token);
  w.put("sk", m.shard);
  w.put("n", floats_in(m.model));
  w.put("wd", dtype_name(m.dtype));
  w.put("dl", m.delta);
  if (m.home) {
    w.put("hm", *m.home);
  }
  if (m.holds) {
    w.put("hc", *m.holds);
  }
  if (payload.z != 0) {
    w.put("z", payload.z);
  }
  return {w.finish(), std::move(payload.bytes)};
}

multipart encode_one(const shard_ack_msg& m) {
  header_writer w{wire_type::shard_ack, common_fields + 4};
  w.put("m", m.member);
  w.put("i", std::uint64_t{0});
  w.put("a", std::uint64_t{0});
  w.put("r", m.round);
  w.put("k", m.token);
  w.put("sk", m.shard);
  w.put("ok", m.ok);
  w.put("sq", m.norm2);
  return {w.finish()};
}

multipart encode_one(const shard_average_msg& m) {
  auto payload = payload_of(m.model, m.dtype, m.compressed);
  header_writer w{wire_type::shard_average,
                  common_fields + 4 + (m.base ? 1 : 0) + (m.held ? 1 : 0) + (payload.z != 0 ? 1 : 0)};
  w.put("m", m.member);
  w.put("i", std::uint64_t{0});
  w.put("a", std::uint64_t{0});
  w.put("r", m.round);
  w.put("k", m.token);
  w.put("sk", m.shard);
  if (m.held) {
    w.put("hc", *m.held);
  }
  return finish_with_payload(w, m.model, m.dtype, m.base, std::move(payload));
}

multipart encode_one(const shard_relay_msg& m) {
  auto payload = payload_of(m.model, m.dtype, m.compressed);
  header_writer w{wire_type::shard_relay, common_fields + 4 + (m.base ? 1 : 0) + (payload.z != 0 ? 1 : 0)};
  w.put("m", std::uint64_t{0});
  w.put("i", std::uint64_t{0});
  w.put("a", m.averager_incarnation);
  w.put("r", m.round);
  w.put("sk", m.shard);
  w.put("of", m.offset);
  return finish_with_payload(w, m.model, m.dtype, m.base, std::move(payload));
}

multipart encode_one(const shard_report_msg& m) {
  header_writer w{wire_type::shard_report, common_fields + 5};
  w.put("m", std::uint64_t{0});
  w.put("i", m.incarnation);
  w.put("a", m.averager_incarnation);
  w.put("r", m.round);
  w.put("sk", m.shard);
  w.put("cs", m.checksum);
  w.put("ok", m.ok);
  w.put("why", clipped(m.why));
  w.put("n", floats_in(m.model));
  return {w.finish(), payload_of(m.model)};
}

multipart encode_one(const spec_request_msg& m) {
  header_writer w{wire_type::spec, common_fields};
  put_common(w, m);
  return {w.finish()};
}

multipart encode_one(const spec_reply_msg& m) {
  header_writer w{wire_type::spec_reply, common_fields + 15};
  put_common(w, m);
  w.put("mf", clipped(m.spec.model));
  w.put("df", clipped(m.spec.data));
  w.put("bs", m.spec.batch_size);
  w.put("sd", m.spec.seed);
  // Names are never clipped: a clipped one would name another model. The averager checks their length.
  w.put("mn", m.spec.model_name);
  w.put("dn", m.spec.dataset);
  w.put("do", m.spec.data_options);
  w.put("ni", m.spec.non_iid);
  w.put("da", m.spec.dirichlet_alpha);
  w.put("lr", m.spec.lr);
  w.put("mo", m.spec.momentum);
  w.put("km", m.spec.keep_momentum);
  w.put("wd", dtype_name(m.spec.wire));
  w.put("md", static_cast<std::uint8_t>(m.mode));
  w.put("ms", m.model_size);
  return {w.finish()};
}

}  // namespace

expected<void> check_spec_fits(const job_spec& spec) {
  const auto too_long = [](const std::string& text) { return text.size() > max_header_string; };
  if (too_long(spec.model_name)) {
    return fail(errc::invalid_argument, "the model name is longer than " + std::to_string(max_header_string) +
                                            " bytes: a worker could not be told it");
  }
  if (too_long(spec.dataset)) {
    return fail(errc::invalid_argument, "the data set name is longer than " + std::to_string(max_header_string) +
                                            " bytes: a worker could not be told it");
  }
  if (spec.data_options.size() > max_header_array) {
    return fail(errc::invalid_argument, "more than " + std::to_string(max_header_array) + " data options");
  }
  for (const auto& o : spec.data_options) {
    if (too_long(o)) {
      return fail(errc::invalid_argument, "the data option '" + o.substr(0, 40) + "...' is longer than " +
                                              std::to_string(max_header_string) + " bytes");
    }
  }
  return {};
}

multipart encode(const to_worker& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

multipart encode(const to_averager& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

multipart encode(const to_operator& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

multipart encode(const to_evaluator& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

multipart encode(const any_msg& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

expected<to_worker> decode_to_worker(const multipart& msg, const codec_limits& limits) {
  const auto read = [&](wire_type type, const header_reader& r) -> expected<to_worker> {
    switch (type) {
      case wire_type::welcome: {
        PRSGD_TRY(expect_no_payload(msg));
        welcome_msg m;
        get_common(r, m);
        m.admitted_round = r.get<round_t>("ad");
        m.mode = get_mode(r);
        m.model_size = r.get<std::uint64_t>("ms");
        m.heartbeat_interval = std::chrono::nanoseconds{r.get<std::int64_t>("hb")};
        m.token = r.get<session_token>("k");
        m.shard_index = r.get<std::uint64_t>("sh");
        m.num_shards = r.get<std::uint64_t>("ns");
        if (m.num_shards == 0 || m.shard_index >= m.num_shards) {
          throw std::range_error("shard " + std::to_string(m.shard_index) + " of " + std::to_string(m.num_shards));
        }
        m.spec.model = r.get<std::string>("mf");
        m.spec.data = r.get<std::string>("df");
        m.spec.batch_size = r.get<std::uint64_t>("bs");
        m.spec.seed = r.get<std::uint64_t>("sd");
        m.spec.wire = get_dtype(r, "wd");
        m.owners = r.get_or<std::vector<std::string>>("ow", {});
        m.upload_buffer = r.get_or<std::uint64_t>("ub", 0);
        m.compress = r.get_or<bool>("wz", false);
        return to_worker{m};
      }
      case wire_type::refused: {
        PRSGD_TRY(expect_no_payload(msg));
        refused_msg m;
        get_common(r, m);
        m.reason = r.get<std::string>("why");
        return to_worker{m};
      }
      case wire_type::restart: {
        restart_msg m;
        get_common(r, m);
        m.interval = r.get<std::uint64_t>("iv");
        m.step_size = r.get<double>("ss");
        m.mode = get_mode(r);
        m.ranges = r.get<std::vector<index_range>>("ranges");
        for (const auto& [b, e] : m.ranges) {
          if (b >= e) {
            throw std::range_error("sample range [" + std::to_string(b) + ", " + std::to_string(e) + ") is empty");
          }
        }
        m.dtype = get_dtype(r, "wd");
        if (r.find("wb") != nullptr) {
          m.base = r.get<round_t>("wb");
        }
        auto model = read_payload(msg, r.get<std::uint64_t>("n"), limits, m.dtype);
        if (!model) {
          return std::move(model).error();
        }
        m.model = std::move(*model);
        if (r.find("hc") != nullptr) {
          m.held = r.get<std::uint64_t>("hc");
          if (m.model && m.model->empty()) {
            m.model.reset();
          }
        }
        return to_worker{std::move(m)};
      }
      case wire_type::heartbeat: return as_sent_to<to_worker>(read_heartbeat(msg, r));
      case wire_type::removed: return as_sent_to<to_worker>(read_common_only<removed_msg>(msg, r));
      case wire_type::stop: return as_sent_to<to_worker>(read_common_only<stop_msg>(msg, r));
      default: return not_for(type, "is not sent to workers");
    }
  };
  return decode_message<to_worker>(msg, limits, read);
}

expected<to_averager> decode_to_averager(const multipart& msg, const codec_limits& limits) {
  const auto read = [&](wire_type type, const header_reader& r) -> expected<to_averager> {
    switch (type) {
      case wire_type::join: {
        join_msg m;
        get_common(r, m);
        m.speed_hint = r.get_or<double>("s", 0.0);
        m.model_fingerprint = r.get_or<std::string>("mf", {});
        m.data_fingerprint = r.get_or<std::string>("df", {});
        // Names this build does not know (a newer worker's) are skipped: the job's dtype is one it knows.
        for (const auto& name : r.get_or<std::vector<std::string>>("wds", {})) {
          if (auto d = algorithms::parse_wire_dtype(name)) {
            m.wire_dtypes.push_back(*d);
          }
        }
        m.sharding = r.get_or<bool>("sc", false);
        m.reads_compressed = r.get_or<bool>("wz", false);
        if (r.find("hc") != nullptr) {
          m.holds = r.get<std::uint64_t>("hc");
        }
        if (r.find("n") == nullptr) {
          PRSGD_TRY(expect_no_payload(msg));
          return to_averager{m};
        }
        auto initial = read_payload(msg, r.get<std::uint64_t>("n"), limits);
        if (!initial) {
          return std::move(initial).error();
        }
        m.initial_model = std::move(*initial);
        return to_averager{std::move(m)};
      }
      case wire_type::evaluator_hello: {
        PRSGD_TRY(expect_no_payload(msg));
        evaluator_hello_msg m;
        get_common(r, m);
        m.model_fingerprint = r.get_or<std::string>("mf", {});
        return to_averager{m};
      }
      case wire_type::evaluation: {
        PRSGD_TRY(expect_no_payload(msg));
        evaluation_msg m;
        get_common(r, m);
        m.request = r.get<std::uint64_t>("q");
        m.accuracy = r.get<double>("acc");
        if (r.find("loss") != nullptr) {
          m.loss = r.get<double>("loss");
        }
        return to_averager{m};
      }
      case wire_type::leave: {
        PRSGD_TRY(expect_no_payload(msg));
        leave_msg m;
        get_common(r, m);
        m.token = r.get<session_token>("k");
        return to_averager{m};
      }
      case wire_type::heartbeat: return as_sent_to<to_averager>(read_heartbeat(msg, r));
      case wire_type::model: {
        model_msg m;
        get_common(r, m);
        m.steps = r.get<std::uint64_t>("st");
        m.samples = r.get<std::uint64_t>("sa");
        m.loss_sum = r.get<double>("ls");
        m.loss_count = r.get<std::uint64_t>("lc");
        m.is_gradient = r.get<bool>("g");
        m.token = r.get<session_token>("k");
        m.cut = r.get_or<bool>("ct", false);
        m.dtype = get_dtype(r, "wd");
        m.delta = r.get_or<bool>("dl", false);
        m.sliced = r.get_or<bool>("sl", false);
        if (m.sliced && r.get<std::uint64_t>("n") != 0) {
          return fail(errc::protocol_error, "a sliced MODEL carries no payload");
        }
        auto params = read_payload(msg, r.get<std::uint64_t>("n"), limits, m.dtype);
        if (!params) {
          return std::move(params).error();
        }
        m.params = std::move(*params);
        return to_averager{std::move(m)};
      }
      case wire_type::status: return as_sent_to<to_averager>(read_common_only<status_request_msg>(msg, r));
      case wire_type::spec: return as_sent_to<to_averager>(read_common_only<spec_request_msg>(msg, r));
      case wire_type::control: {
        PRSGD_TRY(expect_no_payload(msg));
        control_msg m;
        get_common(r, m);
        auto op = parse_control_op(r.get<std::string>("op"));
        if (!op) {
          return fail(errc::protocol_error, op.error().message());
        }
        m.op = *op;
        m.arg = r.get<std::string>("arg");
        return to_averager{m};
      }
      default: return not_for(type, "is not sent to the averager");
    }
  };
  return decode_message<to_averager>(msg, limits, read);
}

expected<to_operator> decode_to_operator(const multipart& msg, const codec_limits& limits) {
  const auto read = [&](wire_type type, const header_reader& r) -> expected<to_operator> {
    switch (type) {
      case wire_type::status_reply: {
        status_reply_msg m;
        get_common(r, m);
        if (msg.size() != 2 || msg[1].size() > max_status_bytes) {
          return fail(errc::protocol_error, "STATUS_REPLY needs one payload frame of at most 4 MiB");
        }
        msgpack::object_handle handle;
        try {
          handle = msgpack::unpack(reinterpret_cast<const char*>(msg[1].data()), msg[1].size(), nullptr, nullptr,
                                   msgpack::unpack_limit(max_status_list, max_status_keys, max_status_bytes,
                                                         max_status_bytes, max_status_bytes, max_status_depth));
        } catch (const msgpack::size_overflow& e) {
          return fail(errc::too_large, std::string{"STATUS_REPLY's status is over a decoding limit ("} + e.what() +
                                           "; at most " + std::to_string(max_status_list) + " list entries, " +
                                           std::to_string(max_status_keys) + " keys, nesting " +
                                           std::to_string(max_status_depth) + ")");
        }
        auto status = std::make_shared<job_status>();
        status_unpacker::object(handle.get(), *status);
        m.status = std::move(status);
        return to_operator{std::move(m)};
      }
      case wire_type::control_reply: {
        PRSGD_TRY(expect_no_payload(msg));
        control_reply_msg m;
        get_common(r, m);
        m.ok = r.get<bool>("ok");
        m.text = r.get<std::string>("why");
        return to_operator{m};
      }
      case wire_type::spec_reply: {
        PRSGD_TRY(expect_no_payload(msg));
        spec_reply_msg m;
        get_common(r, m);
        m.spec.model = r.get<std::string>("mf");
        m.spec.data = r.get<std::string>("df");
        m.spec.batch_size = r.get<std::uint64_t>("bs");
        m.spec.seed = r.get<std::uint64_t>("sd");
        m.spec.model_name = r.get<std::string>("mn");
        m.spec.dataset = r.get<std::string>("dn");
        m.spec.data_options = r.get<std::vector<std::string>>("do");
        m.spec.non_iid = r.get<bool>("ni");
        m.spec.dirichlet_alpha = r.get<double>("da");
        m.spec.lr = r.get<double>("lr");
        m.spec.momentum = r.get<double>("mo");
        m.spec.keep_momentum = r.get<bool>("km");
        m.spec.wire = get_dtype(r, "wd");
        m.mode = get_mode(r);
        m.model_size = r.get<std::uint64_t>("ms");
        return to_operator{std::move(m)};
      }
      default: return not_for(type, "is not sent to an operator");
    }
  };
  return decode_message<to_operator>(msg, limits, read);
}

expected<to_evaluator> decode_to_evaluator(const multipart& msg, const codec_limits& limits) {
  const auto read = [&](wire_type type, const header_reader& r) -> expected<to_evaluator> {
    switch (type) {
      case wire_type::evaluate: {
        evaluate_msg m;
        get_common(r, m);
        m.request = r.get<std::uint64_t>("q");
        auto model = read_payload(msg, r.get<std::uint64_t>("n"), limits);
        if (!model) {
          return std::move(model).error();
        }
        m.model = std::move(*model);
        return to_evaluator{std::move(m)};
      }
      case wire_type::stop:
      case wire_type::refused: {
        // The same STOP and REFUSED a worker gets.
        auto as_worker = decode_to_worker(msg, limits);
        if (!as_worker) {
          return std::move(as_worker).error();
        }
        if (const auto* stop = std::get_if<stop_msg>(&*as_worker)) {
          return to_evaluator{*stop};
        }
        return to_evaluator{std::get<refused_msg>(*as_worker)};
      }
      default: return not_for(type, "is not sent to an evaluator");
    }
  };
  return decode_message<to_evaluator>(msg, limits, read);
}

multipart encode(const shard_msg& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

namespace {
// A shard message's payload compression (`z`; 0: raw).
std::uint64_t compression_of(const header_reader& r) { return r.get_or<std::uint64_t>("z", 0); }
}  // namespace

expected<shard_msg> decode_shard(const multipart& msg, const codec_limits& limits) {
  // Reads frame 1; an empty payload means "no model".
  const auto payload = [&](const header_reader& r,
                           algorithms::wire_dtype dtype = algorithms::wire_dtype::f32) -> expected<flat_buffer> {
    auto p = read_payload(msg, r.get<std::uint64_t>("n"), limits, dtype, compression_of(r));
    if (!p) {
      return std::move(p).error();
    }
    return (*p)->empty() ? flat_buffer{} : std::move(*p);
  };
  const auto read = [&](wire_type type, const header_reader& r) -> expected<shard_msg> {
    switch (type) {
      case wire_type::shard_hello: {
        PRSGD_TRY(expect_no_payload(msg));
        shard_hello_msg m;
        m.incarnation = r.get<incarnation_t>("i");
        m.averager_incarnation = r.get<incarnation_t>("a");
        m.round = r.get<round_t>("r");
        m.shard = r.get<std::uint64_t>("sk");
        m.shards = r.get<std::uint64_t>("sn");
        m.endpoint = r.get<std::string>("ep");
        m.ready = r.get<bool>("rd");
        m.reads_compressed = r.get_or<bool>("wz", false);
        if (m.shards == 0 || m.shard >= m.shards) {
          throw std::range_error("shard " + std::to_string(m.shard) + " of " + std::to_string(m.shards));
        }
        return shard_msg{m};
      }
      case wire_type::shard_setup: {
        shard_setup_msg m;
        m.incarnation = r.get<incarnation_t>("i");
        m.averager_incarnation = r.get<incarnation_t>("a");
        m.round = r.get<round_t>("r");
        m.shard = r.get<std::uint64_t>("sk");
        m.shards = r.get<std::uint64_t>("sn");
        m.offset = r.get<std::uint64_t>("of");
        m.model_size = r.get<std::uint64_t>("ms");
        m.heartbeat_interval = std::chrono::nanoseconds{r.get<std::int64_t>("hb")};
        m.wire = get_dtype(r, "wd");
        m.ring = r.get_or<bool>("rg", false);
        if (m.ring) {
          m.ring_next = r.get<std::string>("rn");
        }
        m.compress = r.get_or<bool>("wz", false);
        if (m.shards == 0 || m.shard >= m.shards) {
          throw std::range_error("shard " + std::to_string(m.shard) + " of " + std::to_string(m.shards));
        }
        auto p = payload(r);
        if (!p) {
          return std::move(p).error();
        }
        m.model = std::move(*p);
        return shard_msg{std::move(m)};
      }
      case wire_type::shard_round: {
        PRSGD_TRY(expect_no_payload(msg));
        shard_round_msg m;
        m.averager_incarnation = r.get<incarnation_t>("a");
        m.round = r.get<round_t>("r");
        m.combine = r.get<bool>("cb");
        for (const auto& [id, token, samples, steps] : r.get<shard_quads>("in")) {
          m.inputs.push_back({id, token, samples, steps});
        }
        m.rule = r.get<std::uint8_t>("ru");
        m.aggregate = r.get<std::uint8_t>("ag");
        m.trim = r.get<double>("tr");
        for (const auto& [id, token] : r.get<shard_pairs>("to")) {
          m.recipients.push_back({id, token});
        }
        m.fetch = r.get<bool>("f");
        return shard_msg{std::move(m)};
      }
      case wire_type::shard_slice:
      case wire_type::shard_average: {
        const member_id member = r.get<member_id>("m");
        const session_token token = r.get<session_token>("k");
        const round_t round = r.get<round_t>("r");
        const auto shard = r.get<std::uint64_t>("sk");
        const auto dtype = get_dtype(r, "wd");
        auto p = payload(r, dtype);
        if (!p) {
          return std::move(p).error();
        }
        if (type == wire_type::shard_slice) {
          shard_slice_msg m{member, token, round, shard, std::move(*p), dtype, r.get_or<bool>("dl", false)};
          m.compressed = compression_of(r) != 0;
          if (r.find("hm") != nullptr) {
            m.home = r.get<std::uint64_t>("hm");
          }
          if (r.find("hc") != nullptr) {
            m.holds = r.get<std::uint64_t>("hc");
          }
          return shard_msg{std::move(m)};
        }
        shard_average_msg m{member, token, round, shard, std::move(*p), dtype};
        m.compressed = compression_of(r) != 0;
        if (r.find("wb") != nullptr) {
          m.base = r.get<round_t>("wb");
        }
        if (r.find("hc") != nullptr) {
          m.held = r.get<std::uint64_t>("hc");
        }
        return shard_msg{std::move(m)};
      }
      case wire_type::shard_ack: {
        PRSGD_TRY(expect_no_payload(msg));
        shard_ack_msg m;
        m.member = r.get<member_id>("m");
        m.token = r.get<session_token>("k");
        m.round = r.get<round_t>("r");
        m.shard = r.get<std::uint64_t>("sk");
        m.ok = r.get<bool>("ok");
        m.norm2 = r.get<double>("sq");
        return shard_msg{m};
      }
      case wire_type::shard_relay: {
        shard_relay_msg m;
        m.averager_incarnation = r.get<incarnation_t>("a");
        m.round = r.get<round_t>("r");
        m.shard = r.get<std::uint64_t>("sk");
        m.offset = r.get<std::uint64_t>("of");
        m.dtype = get_dtype(r, "wd");
        if (r.find("wb") != nullptr) {
          m.base = r.get<round_t>("wb");
        }
        auto p = payload(r, m.dtype);
        if (!p) {
          return std::move(p).error();
        }
        m.model = std::move(*p);
        m.compressed = compression_of(r) != 0;
        return shard_msg{std::move(m)};
      }
      case wire_type::shard_report: {
        shard_report_msg m;
        m.incarnation = r.get<incarnation_t>("i");
        m.averager_incarnation = r.get<incarnation_t>("a");
        m.round = r.get<round_t>("r");
        m.shard = r.get<std::uint64_t>("sk");
        m.checksum = r.get<std::uint64_t>("cs");
        m.ok = r.get<bool>("ok");
        m.why = r.get<std::string>("why");
        auto p = payload(r);
        if (!p) {
          return std::move(p).error();
        }
        m.model = std::move(*p);
        return shard_msg{std::move(m)};
      }
      case wire_type::stop: return as_sent_to<shard_msg>(read_common_only<stop_msg>(msg, r));
      default: return not_for(type, "is not part of sharded averaging");
    }
  };
  return decode_message<shard_msg>(msg, limits, read);
}

std::uint64_t payload_bytes(const multipart& msg) noexcept {
  std::uint64_t n = 0;
  for (std::size_t i = 1; i < msg.size(); ++i) {
    n += msg[i].size();
  }
  return n;
}

}  // namespace prsgd::actors
