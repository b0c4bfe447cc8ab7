// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/model_inputs.hpp"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>

#include "prsgd/algorithms/fashion_mnist.hpp"
#include "prsgd/algorithms/log_mel.hpp"
#include "prsgd/algorithms/wav.hpp"
#include "prsgd/common/file_io.hpp"

namespace prsgd::cli {

namespace {

std::string shape_text(const std::vector<std::size_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    s += (i > 0 ? ", " : "") + std::to_string(dims[i]);
  }
  return s + (dims.size() == 1 ? ",)" : ")");
}

std::string model_shape(const algorithms::shape3& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

unexpected misfit(const std::string& path, const std::string& what) {
  return fail(errc::invalid_argument, path + ": " + what);
}

// Pixels 0..255 -> model inputs: [0, 1], then Fashion-MNIST's normalisation for that data set.
void scale_pixels(std::vector<float>& values, const std::string& dataset) {
  const bool fashion = dataset == "fashion-mnist";
  for (auto& v : values) {
    v /= 255.0F;
    if (fashion) {
      v = (v - algorithms::fashion_mnist_mean) / algorithms::fashion_mnist_std;
    }
  }
}

expected<input_samples> read_png(const std::string& path, const algorithms::shape3& shape, const std::string& dataset) {
  if (shape.channels != 1 && shape.channels != 3) {
    return misfit(path, "PNG input needs a model with 1 (grayscale) or 3 (RGB) input channels, this one takes " +
                            model_shape(shape));
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_file(&image, path.c_str()) == 0) {
    std::string msg = image.message;
    png_image_free(&image);
    return fail(errc::decode_failed, path + ": not a readable PNG (" + msg + ")");
  }
  const bool color = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  if (color != (shape.channels == 3)) {
    png_image_free(&image);
    return misfit(path, std::string("is ") + (color ? "a colour" : "a grayscale") + " PNG; the model takes " +
                            (shape.channels == 3 ? "RGB" : "grayscale") + " images of " + model_shape(shape));
  }
  if (image.width != static_cast<png_uint_32>(shape.width) || image.height != static_cast<png_uint_32>(shape.height)) {
    const std::string got = std::to_string(image.width) + "x" + std::to_string(image.height);
    png_image_free(&image);
    return misfit(path, "is " + got + " pixels; the model takes " + std::to_string(shape.width) + "x" +
                            std::to_string(shape.height) + " (resize it first)");
  }
  image.format = color ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;  // alpha, if any, is composed onto black
  std::vector<unsigned char> pixels(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr) == 0) {
    std::string msg = image.message;
    png_image_free(&image);
    return fail(errc::decode_failed, path + ": cannot decode PNG (" + msg + ")");
  }
  // Interleaved H x W x C -> C x H x W.
  input_samples out;
  out.count = 1;
  out.values.resize(shape.size());
  const std::size_t plane = shape.plane();
  const auto c = static_cast<std::size_t>(shape.channels);
  for (std::size_t p = 0; p < plane; ++p) {
    for (std::size_t k = 0; k < c; ++k) {
      out.values[k * plane + p] = static_cast<float>(pixels[p * c + k]);
    }
  }
  scale_pixels(out.values, dataset);
  return out;
}

expected<input_samples> read_npy_input(const std::string& path, const algorithms::shape3& shape,
                                       const std::string& dataset) {
  auto bytes = read_whole_file(path);
  if (!bytes) {
    return bytes.error();
  }
  auto arr = parse_npy(*bytes);
  if (!arr) {
    return fail(arr.error().code, path + ": " + arr.error().context);
  }
  const auto c = static_cast<std::size_t>(shape.channels);
  const auto h = static_cast<std::size_t>(shape.height);
  const auto w = static_cast<std::size_t>(shape.width);
  const auto& d = arr->shape;
  std::size_t count = 0;
  if (d == std::vector<std::size_t>{c, h, w} || (c == 1 && d == std::vector<std::size_t>{h, w})) {
    count = 1;
  } else if ((d.size() == 4 && d[1] == c && d[2] == h && d[3] == w) ||
             (c == 1 && d.size() == 3 && d[1] == h && d[2] == w)) {
    count = d[0];
  } else {
    return misfit(path, "NPY shape " + shape_text(d) + " does not fit the model input " + model_shape(shape) +
                            ": use (C, H, W) or (N, C, H, W)" + (c == 1 ? ", or (H, W) or (N, H, W)" : ""));
  }
  if (count == 0) {
    return misfit(path, "holds no samples");
  }
  input_samples out;
  out.count = count;
  out.values = std::move(arr->values);
  if (arr->pixels) {
    scale_pixels(out.values, dataset);
  }
  return out;
}

expected<input_samples> read_wav_input(const std::string& path, const algorithms::shape3& shape,
                                       const std::string& dataset) {
  if (dataset != "kws") {
    return misfit(path, "WAV input needs a keyword model (data set kws), not " + dataset);
  }
  auto audio = algorithms::read_wav(path);
  if (!audio) {
    return audio.error();
  }
  auto mel = algorithms::log_mel::make();
  if (!mel) {
    return mel.error();
  }
  // As the keyword data set does: 1 s at 16 kHz, zero-padded or cut.
  constexpr std::size_t clip_samples = 16000;
  std::vector<float> clip(clip_samples, 0.0F);
  std::copy_n(audio->begin(), std::min(audio->size(), clip.size()), clip.begin());
  const algorithms::feature_matrix m = mel->compute(clip);
  if (shape.channels != 1 || m.rows() != shape.height || m.cols() != shape.width) {
    return misfit(path, "log-mel features are 1x" + std::to_string(m.rows()) + "x" + std::to_string(m.cols()) +
                            ", the model takes " + model_shape(shape));
  }
  return input_samples{std::vector<float>(m.data(), m.data() + m.size()), 1};
}

// An uncompressed IDX file of unsigned bytes with rank 3: magic 0x00000803, three big-endian sizes, the bytes.
expected<algorithms::idx_bytes> read_raw_idx3(const std::string& path, const std::vector<unsigned char>& bytes) {
  const auto bad = [&](const std::string& what) { return fail(errc::decode_failed, path + ": " + what); };
  if (bytes.size() < 16 || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 || bytes[3] != 3) {
    return bad(
        "not an IDX file of unsigned-byte images (expected magic 0x00000803; PNG, NPY and WAV files need "
        "their extension)");
  }
  algorithms::idx_bytes out;
  std::uint64_t total = 1;
  for (int i = 0; i < 3; ++i) {
    const unsigned char* b = bytes.data() + 4 + 4 * i;
    const std::uint32_t d =
        (std::uint32_t{b[0]} << 24U) | (std::uint32_t{b[1]} << 16U) | (std::uint32_t{b[2]} << 8U) | b[3];
    out.dims.push_back(d);
    total *= d;
  }
  if (total != bytes.size() - 16) {
    return bad("IDX header says " + std::to_string(total) + " bytes of images, the file has " +
               std::to_string(bytes.size() - 16));
  }
  out.data.assign(bytes.begin() + 16, bytes.end());
  return out;
}

expected<input_samples> read_idx_input(const std::string& path, const algorithms::shape3& shape,
                                       const std::string& dataset) {
  auto bytes = read_whole_file(path);
  if (!bytes) {
    return bytes.error();
  }
  const bool gzipped = bytes->size() >= 2 && (*bytes)[0] == 0x1F && (*bytes)[1] == 0x8B;
  auto idx = gzipped ? algorithms::read_idx_gz(path, 3) : read_raw_idx3(path, *bytes);
  if (!idx) {
    return idx.error();
  }
  const auto& d = idx->dims;
  if (shape.channels != 1 || d[1] != static_cast<std::uint32_t>(shape.height) ||
      d[2] != static_cast<std::uint32_t>(shape.width)) {
    return misfit(path, "IDX images are " + std::to_string(d[1]) + "x" + std::to_string(d[2]) + ", the model takes " +
                            model_shape(shape));
  }
  input_samples out;
  out.count = d[0];
  out.values.assign(idx->data.begin(), idx->data.end());
  scale_pixels(out.values, dataset);
  return out;
}

// Returns the value of `key` in an NPY header dict ("'descr': '<f4', ..."): the text after the colon up to
// the next top-level comma or the closing brace.
std::optional<std::string> header_field(std::string_view header, std::string_view key) {
  const std::string quoted = "'" + std::string(key) + "'";
  const auto at = header.find(quoted);
  if (at == std::string_view::npos) {
    return std::nullopt;
  }
  auto pos = header.find(':', at + quoted.size());
  if (pos == std::string_view::npos) {
    return std::nullopt;
  }
  ++pos;
  int depth = 0;
  std::size_t end = pos;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if ((c == ',' || c == '}') && depth == 0) {
      break;
    }
  }
  std::string v(header.substr(pos, end - pos));
  v.erase(0, v.find_first_not_of(' '));
  v.erase(v.find_last_not_of(' ') + 1);
  return v;
}

}  // namespace

expected<npy_array> parse_npy(const std::vector<unsigned char>& bytes) {
  const auto bad = [](const std::string& what) { return fail(errc::decode_failed, "NPY: " + what); };
  static constexpr unsigned char magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, sizeof magic) != 0) {
    return bad("not an NPY file (bad magic)");
  }
  const unsigned major = bytes[6];
  std::size_t header_len = 0;
  std::size_t header_at = 0;
  if (major == 1) {
    header_len = static_cast<std::size_t>(bytes[8]) | (static_cast<std::size_t>(bytes[9]) << 8U);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) {
      return bad("truncated header");
    }
    header_len = static_cast<std::size_t>(bytes[8]) | (static_cast<std::size_t>(bytes[9]) << 8U) |
                 (static_cast<std::size_t>(bytes[10]) << 16U) | (static_cast<std::size_t>(bytes[11]) << 24U);
    header_at = 12;
  } else {
    return bad("unsupported format version " + std::to_string(major));
  }
  if (header_len > bytes.size() - header_at) {
    return bad("truncated header");
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + header_at), header_len);
  const auto descr = header_field(header, "descr");
  const auto fortran = header_field(header, "fortran_order");
  const auto shape = header_field(header, "shape");
  if (!descr || !fortran || !shape) {
    return bad("header lacks descr, fortran_order or shape");
  }
  if (*fortran != "False") {
    return bad("Fortran-order arrays are not supported (save with C order)");
  }
  npy_array out;
  std::size_t elem = 0;
  if (*descr == "'<f4'") {
    elem = 4;
  } else if (*descr == "'<f8'") {
    elem = 8;
  } else if (*descr == "'|u1'" || *descr == "'<u1'") {
    elem = 1;
    out.pixels = true;
  } else {
    return bad("dtype " + *descr + " is not supported (use float32, float64 or uint8)");
  }
  if (shape->size() < 2 || shape->front() != '(' || shape->back() != ')') {
    return bad("bad shape " + *shape);
  }
  std::size_t count = 1;
  std::string dim;
  for (std::size_t i = 1; i < shape->size(); ++i) {
    const char c = (*shape)[i];
    if (c >= '0' && c <= '9') {
      dim += c;
    } else if (c == ',' || c == ')') {
      if (!dim.empty()) {
        if (dim.size() > 12) {
          return bad("dimension too large in " + *shape);
        }
        const auto n = static_cast<std::size_t>(std::stoull(dim));
        if (n != 0 && count > (std::size_t{1} << 40U) / n) {
          return bad("array too large: " + *shape);
        }
        count *= n;
        out.shape.push_back(n);
        dim.clear();
      }
    } else if (c != ' ') {
      return bad("bad shape " + *shape);
    }
  }
  const std::size_t data_at = header_at + header_len;
  if (bytes.size() - data_at != count * elem) {
    return bad("data is " + std::to_string(bytes.size() - data_at) + " bytes, shape " + *shape + " needs " +
               std::to_string(count * elem));
  }
  out.values.resize(count);
  const unsigned char* data = bytes.data() + data_at;
  for (std::size_t i = 0; i < count; ++i) {
    if (elem == 4) {
      float f = 0;
      std::memcpy(&f, data + 4 * i, 4);
      out.values[i] = f;
    } else if (elem == 8) {
      double v = 0;
      std::memcpy(&v, data + 8 * i, 8);
      out.values[i] = static_cast<float>(v);
    } else {
      out.values[i] = static_cast<float>(data[i]);
    }
  }
  return out;
}

expected<input_samples> read_model_input(const std::string& path, const algorithms::shape3& shape,
                                         const std::string& dataset) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return fail(errc::io_error, path + ": no such file");
  }
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (ext == ".png") {
    return read_png(path, shape, dataset);
  }
  if (ext == ".npy") {
    return read_npy_input(path, shape, dataset);
  }
  if (ext == ".wav") {
    return read_wav_input(path, shape, dataset);
  }
  return read_idx_input(path, shape, dataset);
}

}  // namespace prsgd::cli
