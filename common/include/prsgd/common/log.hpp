// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sstream>
#include <string_view>

namespace prsgd::log {

/// Lists log levels, most verbose first.
enum class level { trace, debug, info, warn, error, off };

/// Sets the process-wide minimum level (default: info, or PRSGD_LOG_LEVEL from the environment).
void set_level(level lvl);
/// Returns the process-wide minimum level.
[[nodiscard]] level current_level();
/// Parses "trace|debug|info|warn|error|off"; returns false for anything else.
[[nodiscard]] bool parse_level(std::string_view text, level& out);
/// Writes one line at `lvl` (thread-safe; backed by spdlog).
void write(level lvl, std::string_view component, std::string_view message);

namespace detail {
/// Collects one streamed log line and writes it in its destructor.
class line {
 public:
  line(level lvl, std::string_view component) : lvl_(lvl), component_(component) {}
  line(const line&) = delete;
  line& operator=(const line&) = delete;
  ~line() { write(lvl_, component_, stream_.str()); }
  template <class T>
  line& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  level lvl_;
  std::string_view component_;
  std::ostringstream stream_;
};
struct voidify {
  void operator&(line&) {}
};
}  // namespace detail

}  // namespace prsgd::log

/// Streams one log line: `PRSGD_LOG(info, "averager") << "round " << r;` Costs nothing below the level.
#define PRSGD_LOG(lvl, component)                            \
  (::prsgd::log::level::lvl < ::prsgd::log::current_level()) \
      ? (void)0                                              \
      : ::prsgd::log::detail::voidify() & ::prsgd::log::detail::line(::prsgd::log::level::lvl, component)
