// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/safetensors.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <set>
#include <utility>

#include "json.hpp"
#include "prsgd/common/file_io.hpp"
#include "prsgd/common/json_quote.hpp"

namespace prsgd::algorithms {

namespace {

static_assert(std::endian::native == std::endian::little, "tensor bytes are copied as little-endian");

// The reference implementation refuses headers above 100 MB; so do we (a hostile length never allocates).
constexpr std::uint64_t max_header_size = 100'000'000;

struct dtype_entry {
  st_dtype type;
  std::string_view name;
  std::size_t size;
};
constexpr std::array<dtype_entry, 15> dtypes{{{st_dtype::boolean, "BOOL", 1},
                                              {st_dtype::u8, "U8", 1},
                                              {st_dtype::i8, "I8", 1},
                                              {st_dtype::f8_e5m2, "F8_E5M2", 1},
                                              {st_dtype::f8_e4m3, "F8_E4M3", 1},
                                              {st_dtype::i16, "I16", 2},
                                              {st_dtype::u16, "U16", 2},
                                              {st_dtype::f16, "F16", 2},
                                              {st_dtype::bf16, "BF16", 2},
                                              {st_dtype::i32, "I32", 4},
                                              {st_dtype::u32, "U32", 4},
                                              {st_dtype::f32, "F32", 4},
                                              {st_dtype::f64, "F64", 8},
                                              {st_dtype::i64, "I64", 8},
                                              {st_dtype::u64, "U64", 8}}};

unexpected bad_file(const std::string& what) { return fail(errc::decode_failed, "safetensors: " + what); }

// Returns the number of elements of `shape`, or nothing on overflow or a negative dimension.
std::optional<std::uint64_t> elements(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (const auto d : shape) {
    if (d < 0) {
      return std::nullopt;
    }
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > UINT64_MAX / u) {
      return std::nullopt;
    }
    n *= u;
  }
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

// One tensor entry of a header, before its bytes are copied.
struct entry {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

expected<entry> parse_entry(const std::string& name, const json::value& v) {
  const std::string where = "tensor " + json_quote(name) + ": ";
  if (name.empty()) {
    // The writer refuses an empty name too; no state_dict key is empty.
    return bad_file("a tensor has an empty name");
  }
  if (v.type != json::value::kind::object) {
    return bad_file(where + "must be an object");
  }
  entry e;
  e.name = name;
  const json::value* dtype = nullptr;
  const json::value* shape = nullptr;
  const json::value* offsets = nullptr;
  for (const auto& [key, field] : v.members) {
    if (key == "dtype") {
      dtype = &field;
    } else if (key == "shape") {
      shape = &field;
    } else if (key == "data_offsets") {
      offsets = &field;
    } else {
      return bad_file(where + "unknown field " + json_quote(key));
    }
  }
  if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
    return bad_file(where + "needs dtype, shape and data_offsets");
  }
  if (dtype->type != json::value::kind::string) {
    return bad_file(where + "dtype must be a string");
  }
  const auto* known =
      std::find_if(dtypes.begin(), dtypes.end(), [&](const dtype_entry& d) { return d.name == dtype->text; });
  if (known == dtypes.end()) {
    return bad_file(where + "unknown dtype " + json_quote(dtype->text));
  }
  e.dtype = known->type;
  if (shape->type != json::value::kind::array) {
    return bad_file(where + "shape must be an array");
  }
  for (const auto& d : shape->items) {
    const auto n = d.as_uint();
    if (!n || *n > static_cast<std::uint64_t>(INT64_MAX)) {
      return bad_file(where + "shape must hold non-negative integers");
    }
    e.shape.push_back(static_cast<std::int64_t>(*n));
  }
  if (offsets->type != json::value::kind::array || offsets->items.size() != 2) {
    return bad_file(where + "data_offsets must be [begin, end]");
  }
  const auto b = offsets->items[0].as_uint();
  const auto en = offsets->items[1].as_uint();
  if (!b || !en || *b > *en) {
    return bad_file(where + "data_offsets must be non-negative integers with begin <= end");
  }
  e.begin = *b;
  e.end = *en;
  const auto count = elements(e.shape);
  const std::uint64_t size = known->size;
  if (!count || *count > UINT64_MAX / size || *count * size != e.end - e.begin) {
    return bad_file(where + "shape " + shape_text(e.shape) + " of " + std::string(known->name) + " needs " +
                    (count && *count <= UINT64_MAX / size ? std::to_string(*count * size) : std::string("too many")) +
                    " bytes, data_offsets give " + std::to_string(e.end - e.begin));
  }
  return e;
}

}  // namespace

std::string_view to_string(st_dtype t) noexcept {
  for (const auto& d : dtypes) {
    if (d.type == t) {
      return d.name;
    }
  }
  return "?";
}

std::size_t element_size(st_dtype t) noexcept {
  for (const auto& d : dtypes) {
    if (d.type == t) {
      return d.size;
    }
  }
  return 0;
}

const st_tensor* st_file::find(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) {
      return &t;
    }
  }
  return nullptr;
}

expected<std::vector<unsigned char>> encode_safetensors(const st_file& f) {
  std::set<std::string_view> names;
  std::string header = "{";
  if (!f.metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : f.metadata) {
      header += (first ? "" : ",") + json_quote(k) + ":" + json_quote(v);
      first = false;
    }
    header += "}";
  }
  std::uint64_t offset = 0;
  for (const auto& t : f.tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      return fail(errc::invalid_argument, "safetensors: bad or duplicate tensor name " + json_quote(t.name));
    }
    const auto count = elements(t.shape);
    if (!count || *count * element_size(t.dtype) != t.data.size()) {
      return fail(errc::invalid_argument, "safetensors: tensor " + t.name + " has " + std::to_string(t.data.size()) +
                                              " bytes, which does not match its dtype and shape " +
                                              shape_text(t.shape));
    }
    header += (header.size() > 1 ? "," : "") + json_quote(t.name) + ":{\"dtype\":\"" + std::string(to_string(t.dtype)) +
              "\",\"shape\":" + shape_text(t.shape) + ",\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + t.data.size()) + "]}";
    offset += t.data.size();
  }
  header += "}";
  // Padded with spaces so that the tensor data starts 8-byte aligned, as the reference writer does.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<unsigned char> out(8 + header.size() + offset);
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  auto* at = out.data() + 8 + header.size();
  for (const auto& t : f.tensors) {
    if (!t.data.empty()) {
      std::memcpy(at, t.data.data(), t.data.size());
      at += t.data.size();
    }
  }
  return out;
}

expected<st_file> decode_safetensors(std::span<const unsigned char> bytes) {
  if (bytes.size() < 8) {
    return bad_file("file is " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  }
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > max_header_size) {
    return bad_file("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(max_header_size));
  }
  if (n > bytes.size() - 8) {
    return bad_file("header length " + std::to_string(n) + " exceeds the " + std::to_string(bytes.size() - 8) +
                    " bytes after it");
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (text.empty() || text.front() != '{') {
    return bad_file("header does not start with '{'");
  }
  auto root = json::parse(text);
  if (!root) {
    return bad_file("header: " + root.error().context);
  }
  if (root->type != json::value::kind::object) {
    return bad_file("header must be a JSON object");
  }
  st_file out;
  std::vector<entry> entries;
  for (const auto& [key, v] : root->members) {
    if (key == "__metadata__") {
      if (v.type != json::value::kind::object) {
        return bad_file("__metadata__ must be an object");
      }
      for (const auto& [mk, mv] : v.members) {
        if (mv.type != json::value::kind::string) {
          return bad_file("__metadata__ value of " + json_quote(mk) + " must be a string");
        }
        out.metadata[mk] = mv.text;
      }
      continue;
    }
    auto e = parse_entry(key, v);
    if (!e) {
      return e.error();
    }
    entries.push_back(std::move(*e));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) {
    return std::pair{a.begin, a.end} < std::pair{b.begin, b.end};
  });
  const std::uint64_t data_size = bytes.size() - 8 - n;
  std::uint64_t expected_begin = 0;
  for (const auto& e : entries) {
    if (e.begin != expected_begin) {
      return bad_file("tensor " + json_quote(e.name) + " starts at byte " + std::to_string(e.begin) + ", expected " +
                      std::to_string(expected_begin) + " (tensor data must follow each other without gap or overlap)");
    }
    expected_begin = e.end;
  }
  if (expected_begin != data_size) {
    return bad_file("tensors cover " + std::to_string(expected_begin) + " bytes of data, the file holds " +
                    std::to_string(data_size));
  }
  const unsigned char* data = bytes.data() + 8 + n;
  out.tensors.reserve(entries.size());
  for (auto& e : entries) {
    st_tensor t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data.assign(data + e.begin, data + e.end);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

expected<void> write_safetensors(const std::filesystem::path& path, const st_file& f) {
  auto bytes = encode_safetensors(f);
  if (!bytes) {
    return bytes.error();
  }
  return write_file_atomically(path, *bytes);
}

expected<st_file> read_safetensors(const std::filesystem::path& path) {
  auto bytes = read_whole_file(path);
  if (!bytes) {
    return bytes.error();
  }
  auto f = decode_safetensors(*bytes);
  if (!f) {
    return fail(f.error().code, path.string() + ": " + f.error().context);
  }
  return f;
}

expected<st_file> export_tensors(const model& m, std::span<const float> params, std::int64_t batches_tracked,
                                 std::map<std::string, std::string> metadata) {
  if (params.size() != m.num_params()) {
    return fail(errc::invalid_argument, "model " + m.name() + " has " + std::to_string(m.num_params()) +
                                            " values, got " + std::to_string(params.size()));
  }
  st_file f;
  f.metadata = std::move(metadata);
  f.tensors.reserve(m.tensors().size());
  for (const auto& info : m.tensors()) {
    st_tensor t;
    t.name = info.name;
    t.shape = info.shape;
    if (info.role == tensor_role::counter) {
      t.dtype = st_dtype::i64;
      t.data.resize(sizeof(std::int64_t));
      std::memcpy(t.data.data(), &batches_tracked, sizeof(std::int64_t));
    } else {
      t.dtype = st_dtype::f32;
      t.data.resize(info.size() * sizeof(float));
      std::memcpy(t.data.data(), params.data() + info.offset, t.data.size());
    }
    f.tensors.push_back(std::move(t));
  }
  return f;
}

expected<std::vector<float>> import_tensors(const model& m, const st_file& f) {
  std::vector<float> params(m.num_params(), 0.0F);
  const auto mismatch = [&](const std::string& what) {
    return fail(errc::invalid_argument, "weights do not fit model " + m.name() + ": " + what);
  };
  for (const auto& info : m.tensors()) {
    const st_tensor* t = f.find(info.name);
    if (t == nullptr) {
      return mismatch("tensor " + info.name + " is missing");
    }
    const st_dtype want = info.role == tensor_role::counter ? st_dtype::i64 : st_dtype::f32;
    if (t->dtype != want) {
      return mismatch("tensor " + info.name + " is " + std::string(to_string(t->dtype)) + ", expected " +
                      std::string(to_string(want)));
    }
    if (t->shape != info.shape) {
      return mismatch("tensor " + info.name + " has shape " + shape_text(t->shape) + ", expected " +
                      shape_text(info.shape));
    }
    if (info.role != tensor_role::counter) {
      std::memcpy(params.data() + info.offset, t->data.data(), t->data.size());
    }
  }
  if (f.tensors.size() != m.tensors().size()) {
    for (const auto& t : f.tensors) {
      const bool known =
          std::any_of(m.tensors().begin(), m.tensors().end(), [&](const tensor_info& i) { return i.name == t.name; });
      if (!known) {
        return mismatch("unexpected tensor " + t.name);
      }
    }
  }
  return params;
}

}  // namespace prsgd::algorithms
