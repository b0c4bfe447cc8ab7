// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/codec.hpp"

#include <msgpack.hpp>

#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
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
};

// A STATUS_REPLY's payload (the msgpack job_status) is at most this long.
constexpr std::size_t max_status_bytes = std::size_t{4} << 20;

// msgpack strings in a header are at most 256 bytes (parse_header's unpack limit).
constexpr std::size_t max_header_string = 256;
// Arrays in a header hold at most this many elements (RESTART's `ranges`, and each [begin, end) pair).
constexpr std::size_t max_header_array = max_restart_ranges;

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

std::string dtype_name(algorithms::wire_dtype dtype) { return std::string{algorithms::to_string(dtype)}; }

// Reads fields from a decoded header map; every getter validates type and presence.
class header_reader {
 public:
  explicit header_reader(const msgpack::object& map) {
    for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
      const auto& kv = map.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) {
        throw std::runtime_error("header key is not a string");
      }
      fields_.emplace(std::string{kv.key.via.str.ptr, kv.key.via.str.size}, &kv.val);
    }
  }
  template <class T>
  T get(const char* key) const {
    auto it = fields_.find(key);
    if (it == fields_.end()) {
      throw std::runtime_error(std::string{"missing header field '"} + key + "'");
    }
    return it->second->as<T>();
  }
  [[nodiscard]] const msgpack::object* find(const char* key) const {
    auto it = fields_.find(key);
    return it == fields_.end() ? nullptr : it->second;
  }
  template <class T>
  T get_or(const char* key, T fallback) const {
    auto it = fields_.find(key);
    return it == fields_.end() ? fallback : it->second->as<T>();
  }

 private:
  std::map<std::string, const msgpack::object*, std::less<>> fields_;
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
    // Bounded unpacking: no array, map or string in a header can make msgpack allocate much.
    out.handle = msgpack::unpack(reinterpret_cast<const char*>(h.data()), h.size(), nullptr, nullptr,
                                 msgpack::unpack_limit(max_header_array, 64, 256, 256, 16, 4));
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
    if (t < 1 || t > static_cast<std::uint8_t>(wire_type::control_reply)) {
      return fail(errc::protocol_error, "unknown message type " + std::to_string(t));
    }
    out.type = static_cast<wire_type>(t);
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, e.what());
  }
  return out;
}

// Decodes frame 1 (`declared` values sent as `dtype`) into a fresh float buffer after checking its size.
expected<flat_buffer> read_payload(const multipart& msg, std::uint64_t declared, algorithms::wire_dtype dtype,
                                   const codec_limits& limits) {
  if (declared > limits.max_model_floats) {
    return fail(errc::too_large, "model of " + std::to_string(declared) + " floats exceeds the limit of " +
                                     std::to_string(limits.max_model_floats));
  }
  if (msg.size() != 2) {
    return fail(errc::protocol_error, "header declares a payload but the message has no payload frame");
  }
  const frame& p = msg[1];
  const std::size_t expected_bytes = algorithms::encoded_size(dtype, declared);
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
    PRSGD_TRY(algorithms::decode(std::span{reinterpret_cast<const std::byte*>(p.data()), p.size()}, dtype, *buf));
  }
  return flat_buffer{std::move(buf)};
}

expected<void> expect_no_payload(const multipart& msg) {
  if (msg.size() != 1) {
    return fail(errc::protocol_error, "unexpected payload frame");
  }
  return {};
}

// One encoder per message type; the variant overloads below dispatch to them.
multipart encode_one(const welcome_msg& m) {
  header_writer w{wire_type::welcome, common_fields + 12};
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
  return {w.finish()};
}

multipart encode_one(const refused_msg& m) {
  header_writer w{wire_type::refused, common_fields + 1};
  put_common(w, m);
  w.put("why", clipped(m.reason));
  return {w.finish()};
}

multipart encode_one(const restart_msg& m) {
  header_writer w{wire_type::restart, common_fields + 6 + (m.base ? 1 : 0)};
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
  header_writer w{wire_type::join, common_fields + 4};
  put_common(w, m);
  w.put("s", m.speed_hint);
  w.put("mf", clipped(m.model_fingerprint));
  w.put("df", clipped(m.data_fingerprint));
  std::vector<std::string> dtypes;
  for (const auto d : m.wire_dtypes) {
    dtypes.push_back(dtype_name(d));
  }
  w.put("wds", dtypes);
  return {w.finish()};
}

multipart encode_one(const leave_msg& m) {
  header_writer w{wire_type::leave, common_fields + 1};
  put_common(w, m);
  w.put("k", m.token);
  return {w.finish()};
}

multipart encode_one(const model_msg& m) {
  header_writer w{wire_type::model, common_fields + 10};
  put_common(w, m);
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

}  // namespace

multipart encode(const to_worker& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

multipart encode(const to_averager& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

multipart encode(const to_operator& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

multipart encode(const any_msg& msg) {
  return std::visit([](const auto& m) { return encode_one(m); }, msg);
}

expected<to_worker> decode_to_worker(const multipart& msg, const codec_limits& limits) {
  auto parsed = parse_header(msg, limits);
  if (!parsed) {
    return std::move(parsed).error();
  }
  try {
    header_reader r{parsed->handle.get()};
    switch (parsed->type) {
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
        auto model = read_payload(msg, r.get<std::uint64_t>("n"), m.dtype, limits);
        if (!model) {
          return std::move(model).error();
        }
        m.model = std::move(*model);
        return to_worker{std::move(m)};
      }
      case wire_type::heartbeat: {
        PRSGD_TRY(expect_no_payload(msg));
        heartbeat_msg m;
        get_common(r, m);
        m.from_averager = r.get<bool>("fa");
        m.token = r.get<session_token>("k");
        m.transfer_bytes = r.get_or<std::uint64_t>("tx", 0);
        return to_worker{m};
      }
      case wire_type::removed: {
        PRSGD_TRY(expect_no_payload(msg));
        removed_msg m;
        get_common(r, m);
        return to_worker{m};
      }
      case wire_type::stop: {
        PRSGD_TRY(expect_no_payload(msg));
        stop_msg m;
        get_common(r, m);
        return to_worker{m};
      }
      default:
        return fail(errc::protocol_error,
                    "message type " + std::to_string(static_cast<int>(parsed->type)) + " is not sent to workers");
    }
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, e.what());
  }
}

expected<to_averager> decode_to_averager(const multipart& msg, const codec_limits& limits) {
  auto parsed = parse_header(msg, limits);
  if (!parsed) {
    return std::move(parsed).error();
  }
  try {
    header_reader r{parsed->handle.get()};
    switch (parsed->type) {
      case wire_type::join: {
        PRSGD_TRY(expect_no_payload(msg));
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
        return to_averager{m};
      }
      case wire_type::leave: {
        PRSGD_TRY(expect_no_payload(msg));
        leave_msg m;
        get_common(r, m);
        m.token = r.get<session_token>("k");
        return to_averager{m};
      }
      case wire_type::heartbeat: {
        PRSGD_TRY(expect_no_payload(msg));
        heartbeat_msg m;
        get_common(r, m);
        m.from_averager = r.get<bool>("fa");
        m.token = r.get<session_token>("k");
        m.transfer_bytes = r.get_or<std::uint64_t>("tx", 0);
        return to_averager{m};
      }
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
        auto params = read_payload(msg, r.get<std::uint64_t>("n"), m.dtype, limits);
        if (!params) {
          return std::move(params).error();
        }
        m.params = std::move(*params);
        return to_averager{std::move(m)};
      }
      case wire_type::status: {
        PRSGD_TRY(expect_no_payload(msg));
        status_request_msg m;
        get_common(r, m);
        return to_averager{m};
      }
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
      default:
        return fail(errc::protocol_error,
                    "message type " + std::to_string(static_cast<int>(parsed->type)) + " is not sent to the averager");
    }
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, e.what());
  }
}

expected<to_operator> decode_to_operator(const multipart& msg, const codec_limits& limits) {
  auto parsed = parse_header(msg, limits);
  if (!parsed) {
    return std::move(parsed).error();
  }
  try {
    header_reader r{parsed->handle.get()};
    switch (parsed->type) {
      case wire_type::status_reply: {
        status_reply_msg m;
        get_common(r, m);
        if (msg.size() != 2 || msg[1].size() > max_status_bytes) {
          return fail(errc::protocol_error, "STATUS_REPLY needs one payload frame of at most 4 MiB");
        }
        const auto handle = msgpack::unpack(reinterpret_cast<const char*>(msg[1].data()), msg[1].size());
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
      default:
        return fail(errc::protocol_error,
                    "message type " + std::to_string(static_cast<int>(parsed->type)) + " is not sent to an operator");
    }
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, e.what());
  }
}

std::uint64_t payload_bytes(const multipart& msg) noexcept {
  std::uint64_t n = 0;
  for (std::size_t i = 1; i < msg.size(); ++i) {
    n += msg[i].size();
  }
  return n;
}

}  // namespace prsgd::actors
