// SPDX-License-Identifier: Apache-2.0
#include "prsgd/common/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <memory>

namespace prsgd::log {
namespace {

level initial_level() {
  level lvl = level::info;
  if (const char* env = std::getenv("PRSGD_LOG_LEVEL")) {
    if (!parse_level(env, lvl)) {
      lvl = level::info;
    }
  }
  return lvl;
}

std::atomic<level>& level_ref() {
  static std::atomic<level> lvl{initial_level()};
  return lvl;
}

spdlog::logger& logger() {
  // Logs go to stderr so that stdout stays free for progress lines and results.
  static std::shared_ptr<spdlog::logger> l = [] {
    auto lg = spdlog::stderr_color_mt("prsgd");
    lg->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
    lg->set_level(spdlog::level::trace);
    return lg;
  }();
  return *l;
}

spdlog::level::level_enum to_spd(level lvl) {
  switch (lvl) {
    case level::trace: return spdlog::level::trace;
    case level::debug: return spdlog::level::debug;
    case level::info: return spdlog::level::info;
    case level::warn: return spdlog::level::warn;
    case level::error: return spdlog::level::err;
    case level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

void set_level(level lvl) { level_ref().store(lvl); }
level current_level() { return level_ref().load(std::memory_order_relaxed); }

bool parse_level(std::string_view text, level& out) {
  static constexpr std::pair<std::string_view, level> names[] = {{"trace", level::trace}, {"debug", level::debug},
                                                                 {"info", level::info},   {"warn", level::warn},
                                                                 {"error", level::error}, {"off", level::off}};
  for (const auto& [name, lvl] : names) {
    if (text == name) {
      out = lvl;
      return true;
    }
  }
  return false;
}

void write(level lvl, std::string_view component, std::string_view message) {
  if (lvl < current_level()) {
    return;
  }
  logger().log(to_spd(lvl), "{}: {}", component, message);
}

}  // namespace prsgd::log
