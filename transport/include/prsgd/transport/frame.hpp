// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "prsgd/transport/fwd.hpp"

namespace prsgd {

/// Holds an immutable, reference-counted byte buffer: one part of a multipart message.
///
/// A frame is a pointer, a size and an owner (`std::shared_ptr<const void>`) that keeps the bytes alive.
/// Copying a frame copies the reference, never the bytes, so a 100 MB model can be handed to the
/// transport (and to N peers) without a copy; the transport keeps the owner until the network stack
/// has released the bytes. The bytes must not be modified while any frame refers to them.
///
/// Alignment: frames made here from `std::vector<T>` keep T's alignment. Frames received from the
/// network carry no alignment guarantee (libzmq packs small frames into shared buffers); check
/// `data()` before reinterpreting and copy when needed.
///
/// Thread contract: a frame is a value; distinct frames sharing an owner may be used on different threads.
class frame {
 public:
  /// Makes an empty frame (size 0).
  frame() = default;

  /// Returns a frame holding a private copy of `size` bytes at `data`.
  [[nodiscard]] static frame copy(const void* data, std::size_t size);
  /// Returns a frame holding a private copy of `text`.
  [[nodiscard]] static frame copy(std::string_view text) { return copy(text.data(), text.size()); }
  /// Returns a frame that takes ownership of `bytes` without copying them.
  [[nodiscard]] static frame take(std::string bytes);
  /// Returns a frame that takes ownership of `bytes` without copying them.
  [[nodiscard]] static frame take(std::vector<std::byte> bytes);
  /// Returns a frame viewing `size` bytes at `data`, kept alive by `owner`; no copy.
  /// @pre `data` stays valid and unmodified while `owner` (or a copy of it) is alive.
  [[nodiscard]] static frame share(std::shared_ptr<const void> owner, const void* data, std::size_t size);
  /// Returns a frame viewing the elements of `values` (e.g. a flat float model); no copy.
  template <class T>
  requires std::is_trivially_copyable_v<T>
  [[nodiscard]] static frame share(std::shared_ptr<const std::vector<T>> values) {
    const void* data = values->data();
    const std::size_t size = values->size() * sizeof(T);
    return share(std::shared_ptr<const void>(std::move(values)), data, size);
  }

  /// Returns the first byte (nullptr for an empty frame made by the default constructor).
  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  /// Returns the number of bytes.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Returns true when the frame has no bytes.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// Returns the bytes as a span.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  /// Returns the bytes as a string view (for headers and tests).
  [[nodiscard]] std::string_view view() const noexcept { return {reinterpret_cast<const char*>(data_), size_}; }
  /// Returns the owner that keeps the bytes alive (null for an empty frame).
  [[nodiscard]] const std::shared_ptr<const void>& owner() const noexcept { return owner_; }

 private:
  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Returns the sum of the sizes of the frames of `msg`.
[[nodiscard]] std::size_t total_size(const multipart& msg) noexcept;

}  // namespace prsgd
