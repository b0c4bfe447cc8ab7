// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/common/expected.hpp"

/// A strict reader of NumPy's .npy format (versions 1.0, 2.0 and 3.0), for numeric arrays.
namespace prsgd::algorithms {

/// Holds what an .npy header says about its array.
struct npy_header {
  /// 'f' (floating point), 'i' (signed integer) or 'u' (unsigned integer, also bool 'b' as 'u').
  char kind = 'f';
  /// Bytes per element: 1, 2, 4 or 8.
  int item_size = 4;
  /// Dimensions, outermost first; empty for a 0-d array.
  std::vector<std::size_t> shape;
  /// Byte offset of the first element (after magic, version, length and header text).
  std::size_t data_offset = 0;
  /// The 'descr' value as written, e.g. "<f4".
  std::string descr;

  /// Returns the number of elements (the product of `shape`; 1 for a 0-d array).
  [[nodiscard]] std::size_t elements() const noexcept;
};

/// Holds an array's header and its raw little-endian, C-order element bytes.
struct npy_array {
  npy_header header;
  /// header.elements() * header.item_size bytes.
  std::vector<std::uint8_t> data;
};

/// Parses the start of an .npy image: the magic "\x93NUMPY", the version (1.0: 2-byte header length;
/// 2.0 and 3.0: 4-byte), and the header dict with exactly the keys 'descr', 'fortran_order' and 'shape'.
/// Returns decode_failed with `name` in the context for a bad magic or version, a truncated or malformed
/// header, an unsupported dtype (only little-endian or byte-sized int, uint, bool and float of 1-8 bytes),
/// big-endian data, Fortran order, or a shape whose size overflows.
[[nodiscard]] expected<npy_header> parse_npy_header(std::span<const std::uint8_t> bytes, std::string_view name);

/// Reads only the header of `file` (parse_npy_header), and checks the file holds exactly the array's bytes
/// after it. Returns io_error naming the file if it cannot be read, decode_failed for a bad header, a
/// truncated file or bytes after the data.
[[nodiscard]] expected<npy_header> read_npy_header(const std::filesystem::path& file);

/// Reads `file` whole; errors as read_npy_header.
[[nodiscard]] expected<npy_array> read_npy(const std::filesystem::path& file);

/// Returns an .npy (version 1.0) image of `data` with dtype `descr` (e.g. "<f4", "|u1", "<i8") and `shape`,
/// for tests and tools. @pre data.size() equals the product of shape times the dtype's size.
[[nodiscard]] std::vector<std::uint8_t> encode_npy(std::string_view descr, const std::vector<std::size_t>& shape,
                                                   std::span<const std::uint8_t> data);

}  // namespace prsgd::algorithms
