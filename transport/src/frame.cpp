// SPDX-License-Identifier: Apache-2.0
#include "prsgd/transport/frame.hpp"

#include <cstring>

namespace prsgd {

frame frame::copy(const void* data, std::size_t size) {
  if (size == 0) {
    return frame{};
  }
  auto bytes = std::make_shared<std::vector<std::byte>>(size);
  std::memcpy(bytes->data(), data, size);
  const void* p = bytes->data();
  return share(std::shared_ptr<const void>(std::move(bytes)), p, size);
}

frame frame::take(std::string bytes) {
  if (bytes.empty()) {
    return frame{};
  }
  auto owner = std::make_shared<std::string>(std::move(bytes));
  const void* p = owner->data();
  const std::size_t n = owner->size();
  return share(std::shared_ptr<const void>(std::move(owner)), p, n);
}

frame frame::take(std::vector<std::byte> bytes) {
  if (bytes.empty()) {
    return frame{};
  }
  auto owner = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  const void* p = owner->data();
  const std::size_t n = owner->size();
  return share(std::shared_ptr<const void>(std::move(owner)), p, n);
}

frame frame::share(std::shared_ptr<const void> owner, const void* data, std::size_t size) {
  frame f;
  f.owner_ = std::move(owner);
  f.data_ = static_cast<const std::byte*>(data);
  f.size_ = size;
  return f;
}

std::size_t total_size(const multipart& msg) noexcept {
  std::size_t n = 0;
  for (const auto& f : msg) {
    n += f.size();
  }
  return n;
}

}  // namespace prsgd
