// SPDX-License-Identifier: Apache-2.0
#include "prsgd/runtime/remote.hpp"

#include <algorithm>
#include <memory>

namespace prsgd::wire::detail {

msgpack::unpack_limit argument_limits() noexcept {
  // Arguments are bounded by the header limit already; these bounds keep a hostile count prefix
  // (array32 of 4 billion elements) from allocating before the bytes run out.
  constexpr std::size_t max_elements = std::size_t{1} << 20;
  constexpr std::size_t max_bytes = std::size_t{64} << 20;
  return msgpack::unpack_limit(max_elements, max_elements, max_bytes, max_bytes, max_bytes, 32);
}

expected<msgpack::object_handle> parse(std::span<const std::byte> bytes) {
  if (bytes.empty()) {
    return fail(errc::decode_failed, "empty msgpack value");
  }
  try {
    std::size_t offset = 0;
    // A small first zone chunk: arguments and results are usually a few bytes, and msgpack's default
    // 8 KiB chunk is a large-bin malloc (and a glibc consolidation) per remote call. The zone grows
    // by itself for larger values.
    auto zone = std::make_unique<msgpack::zone>(std::clamp<std::size_t>(bytes.size() * 4, 256, 8192));
    const msgpack::object obj = msgpack::unpack(*zone, reinterpret_cast<const char*>(bytes.data()), bytes.size(),
                                                offset, nullptr, nullptr, argument_limits());
    if (offset != bytes.size()) {
      return fail(errc::decode_failed, "trailing bytes after the msgpack value");
    }
    return msgpack::object_handle(obj, std::move(zone));
  } catch (const std::bad_alloc&) {
    return fail(errc::decode_failed, "msgpack value: out of memory");
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, std::string{"msgpack value: "} + e.what());
  }
}

}  // namespace prsgd::wire::detail
