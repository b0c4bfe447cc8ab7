// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>

namespace prsgd {

/// Returns `text` as a JSON string literal with its quotes: escapes ", \ and control characters (as \n,
/// \t, ... or \u00XX); UTF-8 passes through unchanged.
[[nodiscard]] std::string json_quote(std::string_view text);

}  // namespace prsgd
