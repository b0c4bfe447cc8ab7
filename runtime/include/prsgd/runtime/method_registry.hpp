// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <any>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prsgd {

/// Maps the methods of actor type `T` to stable names, so a remote proxy can send a call as
/// (type, method name, msgpack-encoded arguments) and the receiving node can find the member pointer:
///
///   static const auto reg = prsgd::method_registry<counter>{"counter"}
///       .method("add", &counter::add).method("get", &counter::get);
///
/// Not thread-safe while being built; safe to read concurrently afterwards.
template <class T>
class method_registry {
 public:
  /// Starts a registry for the type registered as `type_name`.
  explicit method_registry(std::string type_name) : type_name_(std::move(type_name)) {}

  /// Registers `ptr` under `name`; a duplicate name or pointer is a bug (returns *this unchanged).
  template <class M>
  method_registry&& method(std::string name, M ptr) && {
    add(std::move(name), ptr);
    return std::move(*this);
  }
  /// Registers `ptr` under `name` (lvalue form).
  template <class M>
  method_registry& method(std::string name, M ptr) & {
    add(std::move(name), ptr);
    return *this;
  }

  /// Returns the registered type name.
  [[nodiscard]] const std::string& type_name() const noexcept { return type_name_; }
  /// Returns the name `ptr` was registered under, or nullopt.
  template <class M>
  [[nodiscard]] std::optional<std::string_view> name_of(M ptr) const {
    for (const auto& e : entries_) {
      if (const M* p = std::any_cast<M>(&e.ptr); p != nullptr && *p == ptr) {
        return std::string_view{e.name};
      }
    }
    return std::nullopt;
  }
  /// Returns the member pointer of type `M` registered as `name`, or nullopt (unknown or other type).
  template <class M>
  [[nodiscard]] std::optional<M> find(std::string_view name) const {
    for (const auto& e : entries_) {
      if (e.name == name) {
        if (const M* p = std::any_cast<M>(&e.ptr); p != nullptr) {
          return *p;
        }
        return std::nullopt;
      }
    }
    return std::nullopt;
  }
  /// Returns the number of registered methods.
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

 private:
  struct entry {
    std::string name;
    std::any ptr;
  };
  template <class M>
  void add(std::string name, M ptr) {
    for (const auto& e : entries_) {
      if (e.name == name) {
        return;
      }
    }
    if (name_of(ptr)) {
      return;
    }
    entries_.push_back(entry{std::move(name), std::any{ptr}});
  }

  std::string type_name_;
  std::vector<entry> entries_;
};

}  // namespace prsgd
