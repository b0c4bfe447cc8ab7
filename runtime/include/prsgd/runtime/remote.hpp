// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <any>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <msgpack.hpp>

#include "prsgd/common/expected.hpp"
#include "prsgd/runtime/actor_ref.hpp"
#include "prsgd/runtime/actor_system.hpp"
#include "prsgd/runtime/envelope.hpp"

/// Packs a `prsgd::wire::actor_address` as the msgpack array [node, id], so an actor's address can
/// travel inside method arguments and be used on any node (location-transparent handles).
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {
  template <>
  struct convert<prsgd::wire::actor_address> {
    const msgpack::object& operator()(const msgpack::object& o, prsgd::wire::actor_address& v) const {
      if (o.type != msgpack::type::ARRAY || o.via.array.size != 2) {
        throw msgpack::type_error();
      }
      v.node = o.via.array.ptr[0].as<std::string>();
      v.id = o.via.array.ptr[1].as<std::uint64_t>();
      return o;
    }
  };
  template <>
  struct pack<prsgd::wire::actor_address> {
    template <class Stream>
    packer<Stream>& operator()(msgpack::packer<Stream>& o, const prsgd::wire::actor_address& v) const {
      o.pack_array(2);
      o.pack(v.node);
      o.pack(v.id);
      return o;
    }
  };
  }  // namespace adaptor
}
}  // namespace msgpack

namespace prsgd::wire {

namespace detail {

/// Describes a member function pointer: its class, result and decayed argument types.
template <class M>
struct member_traits;
template <class C, class R, class... A>
struct member_traits<R (C::*)(A...)> {
  using result = R;
  using args = std::tuple<std::decay_t<A>...>;
};
template <class C, class R, class... A>
struct member_traits<R (C::*)(A...) const> : member_traits<R (C::*)(A...)> {};
template <class C, class R, class... A>
struct member_traits<R (C::*)(A...) noexcept> : member_traits<R (C::*)(A...)> {};
template <class C, class R, class... A>
struct member_traits<R (C::*)(A...) const noexcept> : member_traits<R (C::*)(A...)> {};

/// Returns the value type of a `future<T>`.
template <class F>
struct future_value;
template <class T>
struct future_value<future<T>> {
  using type = T;
};

/// Writes msgpack output into a byte vector.
struct byte_writer {
  std::vector<std::byte>* out;
  void write(const char* data, std::size_t size) {
    const auto* p = reinterpret_cast<const std::byte*>(data);
    out->insert(out->end(), p, p + size);
  }
};

/// Returns the msgpack limits for argument decoding (bounded allocation for hostile input).
[[nodiscard]] msgpack::unpack_limit argument_limits() noexcept;

/// Parses `bytes` as exactly one msgpack object; decode_failed on malformed or trailing bytes.
[[nodiscard]] expected<msgpack::object_handle> parse(std::span<const std::byte> bytes);

}  // namespace detail

/// Returns `values` packed as one msgpack array (the `args` field of tell/ask/spawn).
template <class Tuple>
[[nodiscard]] std::vector<std::byte> pack_tuple(const Tuple& values) {
  std::vector<std::byte> out;
  detail::byte_writer w{&out};
  msgpack::pack(w, values);
  return out;
}

/// Returns `value` packed as one msgpack object (the `args` field of a reply); nil for `void`.
template <class R>
[[nodiscard]] std::vector<std::byte> pack_value(const R& value) {
  std::vector<std::byte> out;
  detail::byte_writer w{&out};
  msgpack::pack(w, value);
  return out;
}

/// Returns the msgpack array in `bytes` converted to `Tuple`; decode_failed on a wrong count or type.
template <class Tuple>
[[nodiscard]] expected<Tuple> unpack_tuple(std::span<const std::byte> bytes) {
  auto oh = detail::parse(bytes);
  PRSGD_TRY(oh);
  const msgpack::object& o = oh->get();
  if (o.type != msgpack::type::ARRAY || o.via.array.size != std::tuple_size_v<Tuple>) {
    return fail(errc::decode_failed, "arguments must be an array of " + std::to_string(std::tuple_size_v<Tuple>));
  }
  try {
    Tuple out;
    o.convert(out);
    return out;
  } catch (const std::exception& e) {
    return fail(errc::decode_failed, std::string{"arguments: "} + e.what());
  }
}

/// Returns the msgpack object in `bytes` converted to `R`; decode_failed on a wrong type.
template <class R>
[[nodiscard]] expected<R> unpack_value(std::span<const std::byte> bytes) {
  if constexpr (std::is_void_v<R>) {
    return {};
  } else {
    auto oh = detail::parse(bytes);
    PRSGD_TRY(oh);
    try {
      R out{};
      oh->get().convert(out);
      return out;
    } catch (const std::exception& e) {
      return fail(errc::decode_failed, std::string{"result: "} + e.what());
    }
  }
}

/// Receives the encoded result of a remote call exactly once (msgpack bytes or an error).
using reply_fn = std::function<void(expected<std::vector<std::byte>>)>;

/// Calls one registered method on a local actor: decodes `args`, enqueues the call into `target`'s
/// mailbox and, when `done` is set (ask), calls it with the encoded result once the method ran.
/// Returns decode_failed for bad arguments and actor_dead when the mailbox is closed (tell only).
using invoker = std::function<expected<void>(const std::shared_ptr<runtime::detail::cell>& target,
                                             std::span<const std::byte> args, reply_fn done)>;

/// Builds an actor of a registered type from encoded constructor arguments and an optional name.
using factory =
    std::function<expected<actor_addr>(actor_system& system, std::span<const std::byte> args, const std::string& name)>;

/// Describes one actor type that remote nodes may spawn and call.
struct remote_type_info {
  /// Returns the registered type name (the same on every node).
  std::string name;
  /// Returns the C++ type.
  std::type_index type = typeid(void);
  /// Returns the methods by name.
  std::unordered_map<std::string, invoker> methods;
  /// Returns the member pointers and their names (for the caller side).
  std::vector<std::pair<std::any, std::string>> pointers;
  /// Returns the spawn factory, if the type may be spawned remotely.
  factory make;
};

/// Maps actor types and their methods to stable names, so calls can cross processes:
///
///   prsgd::wire::remote_registry reg;
///   reg.add<counter>("counter").constructor<int>().method("add", &counter::add).method("get", &counter::get);
///
/// Every node of a cluster registers the same names. Arguments and results must be msgpack-convertible
/// (numbers, strings, std::vector, std::map, std::tuple, `wire::actor_address`, MSGPACK_DEFINE types).
/// Not thread-safe while being built; safe to read from any thread afterwards.
class remote_registry {
 public:
  /// Adds methods and a constructor to one registered type; returned by `add`.
  template <class T>
  class builder {
   public:
    /// Registers member function `ptr` under `name`.
    template <class M>
    builder& method(std::string name, M ptr) {
      using traits = detail::member_traits<M>;
      using args_t = typename traits::args;
      info_->pointers.emplace_back(std::any{ptr}, name);
      info_->methods[std::move(name)] = [ptr](const std::shared_ptr<runtime::detail::cell>& target,
                                              std::span<const std::byte> bytes, reply_fn done) -> expected<void> {
        auto decoded = unpack_tuple<args_t>(bytes);
        PRSGD_TRY(decoded);
        actor_ref<T> ref{target};
        if (!done) {
          const bool queued = std::apply([&](auto&... a) { return ref.tell(ptr, std::move(a)...); }, *decoded);
          if (!queued) {
            return fail(errc::actor_dead, "actor stopped");
          }
          return {};
        }
        auto fut = std::apply([&](auto&... a) { return ref.ask(ptr, std::move(a)...); }, *decoded);
        using R = typename detail::future_value<std::decay_t<decltype(fut)>>::type;
        // The answer is encoded and handed to the transport (a non-blocking send) on the thread that
        // completes the call, usually the actor's, instead of being posted as one more pool job.
        runtime::detail::continuation_target inline_target;
        inline_target.run_inline = true;
        fut.state()->set_continuation(
            [d = std::move(done)](expected<R> r) {
              if (!r) {
                d(std::move(r).error());
                return;
              }
              if constexpr (std::is_void_v<R>) {
                d(pack_value(msgpack::type::nil_t{}));
              } else {
                d(pack_value(*r));
              }
            },
            inline_target);
        return {};
      };
      return *this;
    }

    /// Lets remote nodes spawn `T` with constructor arguments of types `A...`.
    template <class... A>
    builder& constructor() {
      info_->make = [](actor_system& system, std::span<const std::byte> bytes,
                       const std::string& name) -> expected<actor_addr> {
        auto decoded = unpack_tuple<std::tuple<std::decay_t<A>...>>(bytes);
        PRSGD_TRY(decoded);
        spawn_options opts;
        opts.name = name;
        auto ref = std::apply([&](auto&... a) { return system.spawn<T>(opts, std::move(a)...); }, *decoded);
        if (!ref) {
          return std::move(ref).error();
        }
        return ref->addr();
      };
      return *this;
    }

   private:
    friend class remote_registry;
    explicit builder(remote_type_info* info) : info_(info) {}
    remote_type_info* info_;
  };

  /// Registers `T` under `type_name` (or returns the existing entry) and returns a builder for it.
  template <class T>
  builder<T> add(std::string type_name) {
    auto it = by_type_.find(typeid(T));
    if (it == by_type_.end()) {
      auto info = std::make_shared<remote_type_info>();
      info->type = typeid(T);
      by_name_[type_name] = info;
      info->name = std::move(type_name);
      it = by_type_.emplace(std::type_index(typeid(T)), info).first;
    }
    return builder<T>{it->second.get()};
  }

  /// Returns the type registered as `name`, or nullptr.
  [[nodiscard]] const remote_type_info* find(std::string_view name) const {
    auto it = by_name_.find(std::string{name});
    return it == by_name_.end() ? nullptr : it->second.get();
  }
  /// Returns the entry of C++ type `type`, or nullptr.
  [[nodiscard]] const remote_type_info* find(std::type_index type) const {
    auto it = by_type_.find(type);
    return it == by_type_.end() ? nullptr : it->second.get();
  }
  /// Returns the name member pointer `ptr` of `T` was registered under, or nullopt.
  template <class T, class M>
  [[nodiscard]] std::optional<std::string> method_name(M ptr) const {
    const remote_type_info* info = find(std::type_index(typeid(T)));
    if (info == nullptr) {
      return std::nullopt;
    }
    for (const auto& [any, name] : info->pointers) {
      if (const M* p = std::any_cast<M>(&any); p != nullptr && *p == ptr) {
        return name;
      }
    }
    return std::nullopt;
  }
  /// Returns the registered name of `T`, or nullopt.
  template <class T>
  [[nodiscard]] std::optional<std::string> type_name() const {
    const remote_type_info* info = find(std::type_index(typeid(T)));
    return info == nullptr ? std::nullopt : std::optional<std::string>{info->name};
  }

 private:
  std::unordered_map<std::string, std::shared_ptr<remote_type_info>> by_name_;
  std::unordered_map<std::type_index, std::shared_ptr<remote_type_info>> by_type_;
};

}  // namespace prsgd::wire
