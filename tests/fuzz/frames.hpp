// SPDX-License-Identifier: Apache-2.0
// Multipart messages in the codec and envelope targets: made from a fuzz input, compared byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_input.hpp"
#include "prsgd/transport/frame.hpp"
#include "prsgd/transport/fwd.hpp"

namespace prsgd::fuzz {

/// Returns the message whose frames are the parts of `data` (split_parts), each copied.
[[nodiscard]] inline multipart frames_of(const std::uint8_t* data, std::size_t size) {
  multipart msg;
  for (const auto part : split_parts(data, size)) {
    msg.push_back(frame::copy(part.data(), part.size()));
  }
  return msg;
}

/// Returns the frames of `msg` joined by the part separator: the input that frames_of splits back into `msg`.
[[nodiscard]] inline std::vector<std::uint8_t> join_frames(const multipart& msg) {
  std::vector<std::vector<std::uint8_t>> parts;
  for (const auto& f : msg) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(f.data());
    parts.emplace_back(p, p + f.size());
  }
  return join_parts(parts);
}

/// Returns true when `a` and `b` have the same number of frames with the same bytes.
[[nodiscard]] inline bool same_frames(const multipart& a, const multipart& b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || (a[i].size() > 0 && std::memcmp(a[i].data(), b[i].data(), a[i].size()) != 0)) {
      return false;
    }
  }
  return true;
}

}  // namespace prsgd::fuzz
