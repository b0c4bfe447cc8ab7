// SPDX-License-Identifier: Apache-2.0
// A small strict JSON reader for file headers prsgd reads (safetensors). Private.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms::json {

/// Holds one parsed JSON value. Objects keep their members in document order (duplicate keys are a parse
/// error); numbers keep their text so integers of any size can be checked exactly.
struct value {
  enum class kind : std::uint8_t { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  /// The number's text (kind::number) or the decoded UTF-8 string (kind::string).
  std::string text;
  std::vector<value> items;
  std::vector<std::pair<std::string, value>> members;

  // Declared here and defaulted in json.cpp, where `value` is complete: implicit ones would instantiate
  // std::pair<std::string, value> while `value` is still incomplete, which clang with libstdc++ refuses.
  value();
  value(const value&);
  value(value&&) noexcept;
  value& operator=(const value&);
  value& operator=(value&&) noexcept;
  ~value();

  /// Returns the member `key` of an object, or null when absent.
  [[nodiscard]] const value* find(std::string_view key) const;
  /// Returns the value as an unsigned integer if it is a number written as one that fits in 64 bits.
  [[nodiscard]] std::optional<std::uint64_t> as_uint() const;
};

/// Parses `text` as exactly one JSON value (RFC 8259; nesting at most 64 deep). Returns decode_failed with
/// the byte offset of the first problem.
[[nodiscard]] expected<value> parse(std::string_view text);

}  // namespace prsgd::algorithms::json
