// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "prsgd/runtime/detail/cell.hpp"

namespace prsgd::runtime::detail::tls {

/// The cell whose handlers run on this thread right now (nullptr outside handlers).
inline thread_local cell* current = nullptr;
/// The cell whose actor instance is being constructed on this thread.
inline thread_local cell* constructing = nullptr;

/// Sets `constructing` for the lifetime of the scope.
class constructing_scope {
 public:
  explicit constructing_scope(cell* c) noexcept : prev_(constructing) { constructing = c; }
  constructing_scope(const constructing_scope&) = delete;
  constructing_scope& operator=(const constructing_scope&) = delete;
  ~constructing_scope() { constructing = prev_; }

 private:
  cell* prev_;
};

}  // namespace prsgd::runtime::detail::tls
