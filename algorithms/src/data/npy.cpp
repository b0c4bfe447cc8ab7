// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/npy.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <system_error>

#include "dataset_files.hpp"
#include "prsgd/algorithms/datasets.hpp"

namespace prsgd::algorithms {
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the npy reader assumes a little-endian host");

namespace {

constexpr std::uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// NumPy itself refuses headers above 10000 bytes unless told otherwise; allow more, but not unbounded.
constexpr std::size_t max_header_bytes = std::size_t{1} << 20;

/// Parses the header's Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
class dict_parser {
 public:
  dict_parser(std::string_view text, std::string_view name) : s_(text), name_(name) {}

  expected<npy_header> parse() {
    npy_header h;
    bool have_descr = false;
    bool have_order = false;
    bool have_shape = false;
    skip_space();
    if (!eat('{')) {
      return bad("the header is not a dict");
    }
    for (;;) {
      skip_space();
      if (eat('}')) {
        break;
      }
      auto key = string();
      PRSGD_TRY(key);
      skip_space();
      if (!eat(':')) {
        return bad("expected ':' after '" + *key + "'");
      }
      skip_space();
      if (*key == "descr" && !have_descr) {
        auto d = string();
        PRSGD_TRY(d);
        h.descr = *d;
        have_descr = true;
      } else if (*key == "fortran_order" && !have_order) {
        if (take_word("True")) {
          return bad("the array is in Fortran order; save it in C order (numpy.ascontiguousarray)");
        }
        if (!take_word("False")) {
          return bad("'fortran_order' must be True or False");
        }
        have_order = true;
      } else if (*key == "shape" && !have_shape) {
        PRSGD_TRY(shape(h.shape));
        have_shape = true;
      } else {
        return bad("unexpected or repeated key '" + *key + "' in the header");
      }
      skip_space();
      if (eat(',')) {
        continue;
      }
      skip_space();
      if (eat('}')) {
        break;
      }
      return bad("expected ',' or '}' in the header");
    }
    skip_space();
    if (i_ != s_.size()) {
      return bad("text after the header dict");
    }
    if (!have_descr || !have_order || !have_shape) {
      return bad("the header lacks 'descr', 'fortran_order' or 'shape'");
    }
    PRSGD_TRY(parse_descr(h));
    return h;
  }

 private:
  prsgd::unexpected bad(const std::string& why) const {
    return fail(errc::decode_failed, std::string(name_) + ": not a valid .npy file: " + why);
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool take_word(std::string_view w) {
    if (s_.substr(i_, w.size()) == w) {
      i_ += w.size();
      return true;
    }
    return false;
  }
  expected<std::string> string() {
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) {
      return bad("expected a quoted string in the header");
    }
    const char quote = s_[i_++];
    const auto end = s_.find(quote, i_);
    if (end == std::string_view::npos) {
      return bad("unterminated string in the header");
    }
    std::string out{s_.substr(i_, end - i_)};
    i_ = end + 1;
    return out;
  }
  expected<void> shape(std::vector<std::size_t>& out) {
    if (!eat('(')) {
      return bad("'shape' must be a tuple");
    }
    for (;;) {
      skip_space();
      if (eat(')')) {
        return {};
      }
      if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') {
        return bad("'shape' must hold non-negative integers");
      }
      std::size_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        if (v > (std::numeric_limits<std::size_t>::max() - 9) / 10) {
          return bad("a dimension in 'shape' is too large");
        }
        v = v * 10 + static_cast<std::size_t>(s_[i_++] - '0');
      }
      out.push_back(v);
      skip_space();
      if (eat(')')) {
        return {};
      }
      if (!eat(',')) {
        return bad("expected ',' or ')' in 'shape'");
      }
    }
  }
  expected<void> parse_descr(npy_header& h) const {
    const std::string& d = h.descr;
    const auto unsupported = [&] {
      return bad("unsupported dtype '" + d + "' (numeric types only: int, uint, bool, float32, float64)");
    };
    if (d.size() < 3) {
      return unsupported();
    }
    const char order = d[0];
    char kind = d[1];
    int size = 0;
    for (std::size_t k = 2; k < d.size(); ++k) {
      if (d[k] < '0' || d[k] > '9' || size > 100) {
        return unsupported();
      }
      size = size * 10 + (d[k] - '0');
    }
    if (kind == 'b') {
      kind = 'u';
    }
    const bool sized = kind == 'f' ? (size == 4 || size == 8) : (size == 1 || size == 2 || size == 4 || size == 8);
    if ((kind != 'f' && kind != 'i' && kind != 'u') || !sized) {
      return unsupported();
    }
    if (order == '>' && size > 1) {
      return bad("dtype '" + d + "' is big-endian; save it little-endian (arr.astype('<" + d.substr(1) + "'))");
    }
    if (order != '<' && order != '|' && order != '=' && order != '>') {
      return unsupported();
    }
    h.kind = kind;
    h.item_size = size;
    std::size_t n = 1;
    for (const std::size_t dim : h.shape) {
      if (dim != 0 && n > std::numeric_limits<std::size_t>::max() / 16 / dim) {
        return bad("the shape's size overflows");
      }
      n *= dim;
    }
    return {};
  }

  std::string_view s_;
  std::string_view name_;
  std::size_t i_ = 0;
};

std::uint32_t little_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8U |
         static_cast<std::uint32_t>(p[2]) << 16U | static_cast<std::uint32_t>(p[3]) << 24U;
}

}  // namespace

std::size_t npy_header::elements() const noexcept {
  std::size_t n = 1;
  for (const std::size_t d : shape) {
    n *= d;
  }
  return n;
}

expected<npy_header> parse_npy_header(std::span<const std::uint8_t> bytes, std::string_view name) {
  const auto bad = [&](const std::string& why) {
    return fail(errc::decode_failed, std::string(name) + ": not a valid .npy file: " + why);
  };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, sizeof magic) != 0) {
    return bad("it does not start with \\x93NUMPY");
  }
  const int major = bytes[6];
  std::size_t header_len = 0;
  std::size_t start = 0;
  if (major == 1) {
    header_len = static_cast<std::size_t>(bytes[8]) | static_cast<std::size_t>(bytes[9]) << 8U;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) {
      return bad("truncated header");
    }
    header_len = little_u32(bytes.data() + 8);
    start = 12;
  } else {
    return bad("format version " + std::to_string(major) + "." + std::to_string(bytes[7]) +
               " (this reader knows 1.0, 2.0 and 3.0)");
  }
  if (header_len > max_header_bytes) {
    return bad("the header claims " + std::to_string(header_len) + " bytes");
  }
  if (bytes.size() < start + header_len) {
    return bad("truncated header (" + std::to_string(bytes.size()) + " bytes, the header ends at " +
               std::to_string(start + header_len) + ")");
  }
  const std::string_view text{reinterpret_cast<const char*>(bytes.data() + start), header_len};
  auto h = dict_parser{text, name}.parse();
  PRSGD_TRY(h);
  h->data_offset = start + header_len;
  return h;
}

namespace {

/// Reads the header of an open file, leaving the stream at the data.
expected<npy_header> read_header(std::ifstream& in, const std::string& name) {
  std::vector<std::uint8_t> head(12);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (head.size() < 10) {
    return fail(errc::decode_failed, name + ": not a valid .npy file: only " + std::to_string(head.size()) + " bytes");
  }
  std::size_t len = 0;
  std::size_t start = 0;
  if (head[6] == 1) {
    len = static_cast<std::size_t>(head[8]) | static_cast<std::size_t>(head[9]) << 8U;
    start = 10;
  } else if (head.size() == 12) {
    len = little_u32(head.data() + 8);
    start = 12;
  }
  if (len <= max_header_bytes && start > 0) {
    head.resize(start + len);
    if (start + len > 12) {
      in.read(reinterpret_cast<char*>(head.data() + 12), static_cast<std::streamsize>(start + len - 12));
      head.resize(12 + static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
    }
  }
  auto h = parse_npy_header(head, name);
  PRSGD_TRY(h);
  in.clear();
  in.seekg(static_cast<std::streamoff>(h->data_offset));
  return h;
}

expected<npy_header> check_size(const npy_header& h, const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) {
    return fail(errc::io_error, file.string() + ": cannot read: " + ec.message());
  }
  const std::size_t want = h.data_offset + h.elements() * static_cast<std::size_t>(h.item_size);
  if (size < want) {
    return fail(errc::decode_failed, file.string() + ": truncated: " + std::to_string(size) + " bytes, the header's " +
                                         h.descr + " array needs " + std::to_string(want));
  }
  if (size > want) {
    return fail(errc::decode_failed,
                file.string() + ": " + std::to_string(size - want) + " bytes after the array the header describes");
  }
  return h;
}

}  // namespace

expected<npy_header> read_npy_header(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return fail(errc::io_error, file.string() + ": cannot open");
  }
  auto h = read_header(in, file.string());
  PRSGD_TRY(h);
  return check_size(*h, file);
}

expected<npy_array> read_npy(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return fail(errc::io_error, file.string() + ": cannot open");
  }
  auto h = read_header(in, file.string());
  PRSGD_TRY(h);
  PRSGD_TRY(check_size(*h, file));
  npy_array out{*h, {}};
  out.data.resize(h->elements() * static_cast<std::size_t>(h->item_size));
  in.read(reinterpret_cast<char*>(out.data.data()), static_cast<std::streamsize>(out.data.size()));
  if (static_cast<std::size_t>(in.gcount()) != out.data.size()) {
    return fail(errc::io_error, file.string() + ": read failed");
  }
  return out;
}

std::vector<std::uint8_t> encode_npy(std::string_view descr, const std::vector<std::size_t>& shape,
                                     std::span<const std::uint8_t> data) {
  std::string dims;
  for (const std::size_t d : shape) {
    dims += std::to_string(d) + ", ";
  }
  if (shape.size() > 1) {
    dims.resize(dims.size() - 2);
  } else if (shape.size() == 1) {
    dims.pop_back();  // "(5,)"
  }
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad with spaces so that the data starts at a multiple of 64 bytes, ending in '\n', like NumPy.
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::vector<std::uint8_t> out(magic, magic + sizeof magic);
  out.push_back(1);
  out.push_back(0);
  out.push_back(static_cast<std::uint8_t>(header.size() & 0xFFU));
  out.push_back(static_cast<std::uint8_t>(header.size() >> 8U));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// ---- the `npy` data set ----

namespace {

struct npy_split {
  fs::path x_file;
  fs::path y_file;
  npy_header x;
  std::vector<std::int32_t> labels;
  std::array<int, 3> shape{1, 1, 1};
};

std::string shape_text(const std::array<int, 3>& s) {
  return std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
}

template <class T>
T element(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Reads a labels file: (N,) or (N,1) of any integer type, every value >= 0.
expected<std::vector<std::int32_t>> read_labels(const fs::path& file) {
  auto a = read_npy(file);
  PRSGD_TRY(a);
  const npy_header& h = a->header;
  const std::string name = file.string();
  if (h.kind != 'i' && h.kind != 'u') {
    return fail(errc::decode_failed, name + ": labels must be integers (got dtype '" + h.descr + "')");
  }
  if (h.shape.empty() || h.shape.size() > 2 || (h.shape.size() == 2 && h.shape[1] != 1)) {
    std::string dims;
    for (auto d : h.shape) {
      dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    }
    return fail(errc::decode_failed, name + ": labels must have shape (N,) or (N, 1) (got (" + dims + "))");
  }
  std::vector<std::int32_t> out(h.shape[0]);
  const auto size = static_cast<std::size_t>(h.item_size);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::uint8_t* p = a->data.data() + i * size;
    std::int64_t v = 0;
    if (h.kind == 'i') {
      v = size == 1   ? element<std::int8_t>(p)
          : size == 2 ? element<std::int16_t>(p)
          : size == 4 ? element<std::int32_t>(p)
                      : element<std::int64_t>(p);
    } else {
      const std::uint64_t u = size == 1   ? element<std::uint8_t>(p)
                              : size == 2 ? element<std::uint16_t>(p)
                              : size == 4 ? element<std::uint32_t>(p)
                                          : element<std::uint64_t>(p);
      v = u > static_cast<std::uint64_t>(max_label) ? max_label + 1 : static_cast<std::int64_t>(u);
    }
    PRSGD_TRY(check_label(v, name, "row " + std::to_string(i)));
    out[i] = static_cast<std::int32_t>(v);
  }
  return out;
}

/// Converts a features array to floats: float32 as is, float64 narrowed, uint8 / 255.
expected<std::vector<float>> read_features(const fs::path& file, const npy_header& expect, std::size_t sample_size) {
  auto a = read_npy(file);
  PRSGD_TRY(a);
  if (a->header.descr != expect.descr || a->header.shape != expect.shape) {
    return fail(errc::decode_failed, file.string() + ": changed while it was being read");
  }
  const std::size_t n = a->header.elements();
  std::vector<float> out(n);
  const std::uint8_t* p = a->data.data();
  if (a->header.kind == 'u') {
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = static_cast<float>(p[i]) / 255.0F;
    }
    return out;
  }
  for (std::size_t i = 0; i < n; ++i) {
    float v = std::numeric_limits<float>::infinity();
    if (a->header.item_size == 4) {
      v = element<float>(p + i * 4);
    } else if (const double w = element<double>(p + i * 8); std::abs(w) <= std::numeric_limits<float>::max()) {
      v = static_cast<float>(w);  // NaN and values beyond float's range stay infinite and are refused below
    }
    if (!std::isfinite(v)) {
      return fail(errc::decode_failed, file.string() + ": sample " + std::to_string(i / sample_size) +
                                           " has a NaN or infinite value (or one beyond float32's range)");
    }
    out[i] = v;
  }
  return out;
}

/// Reads a split's headers and labels, and checks them against each other.
expected<npy_split> open_split(const fs::path& dir, const char* which) {
  npy_split s;
  s.x_file = dir / (std::string(which) + "_x.npy");
  s.y_file = dir / (std::string(which) + "_y.npy");
  for (const fs::path* f : {&s.x_file, &s.y_file}) {
    std::error_code ec;
    if (!fs::is_regular_file(*f, ec)) {
      return fail(errc::not_found, f->string() +
                                       ": no such file (the npy data set needs train_x.npy, "
                                       "train_y.npy, test_x.npy and test_y.npy)");
    }
  }
  auto x = read_npy_header(s.x_file);
  PRSGD_TRY(x);
  s.x = *x;
  const std::string name = s.x_file.string();
  if (!(x->kind == 'f' || (x->kind == 'u' && x->item_size == 1 && x->descr != "|b1"))) {
    return fail(errc::decode_failed,
                name + ": features must be float32, float64 or uint8 (got dtype '" + x->descr + "')");
  }
  const auto& d = x->shape;
  if (d.empty() || d.size() > 4) {
    return fail(errc::decode_failed,
                name + ": features must have 1 to 4 dimensions, samples first (got " + std::to_string(d.size()) + ")");
  }
  if (d[0] == 0) {
    return fail(errc::decode_failed, name + ": holds no samples");
  }
  std::size_t sample = 1;
  for (std::size_t k = 1; k < d.size(); ++k) {
    if (d[k] == 0 || d[k] > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return fail(errc::decode_failed, name + ": dimension " + std::to_string(k) + " is " + std::to_string(d[k]));
    }
    sample *= d[k];
  }
  if (sample > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    return fail(errc::decode_failed, name + ": a sample has " + std::to_string(sample) + " values");
  }
  const auto dim = [&](std::size_t k) { return static_cast<int>(d[k]); };
  if (d.size() == 2) {
    s.shape = {1, 1, dim(1)};
  } else if (d.size() == 3) {
    s.shape = {1, dim(1), dim(2)};
  } else if (d.size() == 4) {
    s.shape = {dim(1), dim(2), dim(3)};
  }
  auto labels = read_labels(s.y_file);
  PRSGD_TRY(labels);
  if (labels->size() != d[0]) {
    return fail(errc::decode_failed, s.y_file.string() + " has " + std::to_string(labels->size()) + " labels but " +
                                         name + " has " + std::to_string(d[0]) + " samples");
  }
  s.labels = std::move(*labels);
  return s;
}

dataset make_split(const npy_split& s, int classes, std::vector<float> features, const char* which) {
  dataset out;
  out.features = std::move(features);
  out.labels = s.labels;
  out.shape = s.shape;
  out.num_classes = classes;
  out.name = "npy:" + s.x_file.parent_path().string() + ":" + which;
  return out;
}

}  // namespace

expected<loaded_dataset> load_npy_dataset(const dataset_request& request) {
  PRSGD_TRY(check_dataset_options(request, "npy", {"classes"}));
  if (request.dir.empty()) {
    return fail(errc::invalid_argument,
                "the npy data set needs --data-dir (a directory with train_x.npy, "
                "train_y.npy, test_x.npy and test_y.npy)");
  }
  auto train = open_split(request.dir, "train");
  PRSGD_TRY(train);
  auto test = open_split(request.dir, "test");
  PRSGD_TRY(test);
  if (train->shape != test->shape) {
    return fail(errc::decode_failed, test->x_file.string() + ": samples are " + shape_text(test->shape) + " but " +
                                         train->x_file.string() + "'s are " + shape_text(train->shape));
  }
  auto classes =
      class_count(request, {{&train->labels, train->y_file.string()}, {&test->labels, test->y_file.string()}});
  PRSGD_TRY(classes);

  loaded_dataset out;
  out.shape = train->shape;
  out.num_classes = *classes;
  out.train_size = train->labels.size();
  const std::size_t sample = static_cast<std::size_t>(out.shape[0]) * static_cast<std::size_t>(out.shape[1]) *
                             static_cast<std::size_t>(out.shape[2]);
  if (request.parts == dataset_parts::train) {
    auto x = read_features(train->x_file, train->x, sample);
    PRSGD_TRY(x);
    out.train = make_split(*train, *classes, std::move(*x), "train");
  } else if (request.parts == dataset_parts::test_and_train_size) {
    out.train_labels = train->labels;
    auto x = read_features(test->x_file, test->x, sample);
    PRSGD_TRY(x);
    out.test = make_split(*test, *classes, std::move(*x), "test");
  }
  return out;
}

}  // namespace prsgd::algorithms
