// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/algorithms/model.hpp"
#include "prsgd/common/expected.hpp"

/// The safetensors file format (what PyTorch's `safetensors.torch.save_file` writes) and the conversion
/// between a model's flat parameter buffer and named tensors.
///
/// A file is: an 8-byte little-endian header length N, N bytes of JSON
/// `{"__metadata__": {"key": "value", ...}, "name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}`
/// padded with spaces to a multiple of 8, then the tensors' raw little-endian bytes; [b, e) is relative to
/// the end of the header, and the tensors tile the data exactly, in order, without gaps.
namespace prsgd::algorithms {

/// Lists the element types of the safetensors format.
enum class st_dtype : std::uint8_t {
  boolean,
  u8,
  i8,
  f8_e5m2,
  f8_e4m3,
  i16,
  u16,
  f16,
  bf16,
  i32,
  u32,
  f32,
  f64,
  i64,
  u64
};

/// Returns the format's name of `t` ("F32", "I64", "BOOL", ...).
[[nodiscard]] std::string_view to_string(st_dtype t) noexcept;
/// Returns the size of one element of `t` in bytes.
[[nodiscard]] std::size_t element_size(st_dtype t) noexcept;

/// Holds one tensor of a safetensors file.
struct st_tensor {
  /// The tensor's name (a PyTorch state_dict key).
  std::string name;
  st_dtype dtype = st_dtype::f32;
  /// Its shape; empty for a scalar.
  std::vector<std::int64_t> shape;
  /// Its values, raw little-endian, element_size(dtype) × product(shape) bytes.
  std::vector<unsigned char> data;
};

/// Holds the contents of a safetensors file. Value type.
struct st_file {
  /// The tensors, in the order of their data in the file.
  std::vector<st_tensor> tensors;
  /// The `__metadata__` map (string to string).
  std::map<std::string, std::string> metadata;

  /// Returns the tensor called `name`, or null.
  [[nodiscard]] const st_tensor* find(std::string_view name) const;
};

/// Returns `f` in safetensors bytes, tensors in the order given. Returns invalid_argument for an empty or
/// duplicate name, the reserved name `__metadata__`, a negative dimension, or data whose size does not
/// match dtype and shape.
[[nodiscard]] expected<std::vector<unsigned char>> encode_safetensors(const st_file& f);
/// Parses safetensors bytes, validating everything: the header length against the size, the JSON (well
/// formed, no duplicate names, metadata values strings, known dtypes, non-negative integer shapes and
/// offsets), shape × element size against each byte range, and ranges that start at 0 and follow each
/// other without gap or overlap to the end of the bytes. Returns decode_failed saying what is wrong.
[[nodiscard]] expected<st_file> decode_safetensors(std::span<const unsigned char> bytes);
/// Writes encode_safetensors(f) to `path` atomically (temp file, fsync, rename). Returns its errors or io_error.
[[nodiscard]] expected<void> write_safetensors(const std::filesystem::path& path, const st_file& f);
/// Reads and decodes `path`. Returns io_error naming the file, or decode_failed prefixed with it.
[[nodiscard]] expected<st_file> read_safetensors(const std::filesystem::path& path);

/// Returns `params` (in `m`'s flat layout: what `m.params()`, x̄ or a checkpoint holds) as the named tensors
/// of `m.tensors()`: F32 tensors in PyTorch's layout, counters (batch norm's num_batches_tracked) as
/// I64 scalars holding `batches_tracked`. `metadata` is copied as is.
/// Returns invalid_argument when params.size() != m.num_params().
[[nodiscard]] expected<st_file> export_tensors(const model& m, std::span<const float> params,
                                               std::int64_t batches_tracked = 0,
                                               std::map<std::string, std::string> metadata = {});
/// Returns the flat parameter buffer of `m`'s layout that `f` describes: `f` must hold exactly the tensors of
/// `m.tensors()` (same names, F32 with equal shapes; counters I64 scalars, whose values are ignored).
/// Returns invalid_argument naming the first missing, unexpected or mismatching tensor.
[[nodiscard]] expected<std::vector<float>> import_tensors(const model& m, const st_file& f);

}  // namespace prsgd::algorithms
