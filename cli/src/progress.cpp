// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace prsgd::cli {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// 950 -> "950", 10300 -> "10.3k", 2.5e6 -> "2.50M".
std::string si(double v) {
  if (v >= 1e6) {
    return fixed(v / 1e6, 2) + "M";
  }
  if (v >= 1e4) {
    return fixed(v / 1e3, 1) + "k";
  }
  return fixed(v, 0);
}

}  // namespace

std::optional<double> estimate_eta_s(const progress_snapshot& s) {
  if (s.round <= 0 || s.total_rounds <= 0 || s.elapsed_s < 0) {
    return std::nullopt;
  }
  const long left = s.total_rounds > s.round ? s.total_rounds - s.round : 0;
  return s.elapsed_s / static_cast<double>(s.round) * static_cast<double>(left);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    return "?";
  }
  const auto total = static_cast<long long>(std::llround(seconds));
  const long long h = total / 3600;
  const long long m = (total % 3600) / 60;
  const long long sec = total % 60;
  char buf[64];
  if (h > 0) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", h, m);
  } else if (m > 0) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", m, sec);
  } else {
    std::snprintf(buf, sizeof buf, "%llds", sec);
  }
  return buf;
}

std::string format_progress(const progress_snapshot& s, progress_style style, std::size_t width) {
  std::string line = "round " + std::to_string(s.round);
  if (s.total_rounds > 0) {
    line += "/" + std::to_string(s.total_rounds);
  }
  line += " epoch " + fixed(s.epoch, 2);
  line += " members " + std::to_string(s.members);
  line += " loss " + (s.train_loss ? fixed(*s.train_loss, 4) : std::string{"-"});
  line += " acc " + (s.test_acc ? fixed(*s.test_acc * 100.0, 2) + "%" : std::string{"-"});
  line += " " + (s.samples_per_s > 0 ? si(s.samples_per_s) : std::string{"-"}) + " samples/s";
  const auto eta = estimate_eta_s(s);
  line += " ETA " + (eta ? format_duration(*eta) : std::string{"?"});
  if (style == progress_style::plain) {
    return line + "\n";
  }
  if (width > 0 && line.size() > width - 1) {
    line.resize(width - 1);  // keep the cursor off the last column so the terminal never wraps
  }
  return "\r" + line + "\x1b[K";
}

progress_reporter::progress_reporter(std::FILE* out, progress_style style, std::size_t width)
    : out_(out), style_(style), width_(width) {}

progress_reporter::progress_reporter(progress_reporter&& other) noexcept
    : out_(other.out_), style_(other.style_), width_(other.width_), open_line_(other.open_line_) {
  other.open_line_ = false;
}

progress_reporter::~progress_reporter() { finish(); }

progress_reporter progress_reporter::for_stream(std::FILE* out) {
  const bool tty = ::isatty(::fileno(out)) == 1;
  std::size_t width = 100;
  if (const char* cols = std::getenv("COLUMNS"); cols != nullptr) {
    const long c = std::strtol(cols, nullptr, 10);
    if (c >= 20 && c <= 1000) {
      width = static_cast<std::size_t>(c);
    }
  }
  return progress_reporter{out, tty ? progress_style::tty : progress_style::plain, width};
}

void progress_reporter::update(const progress_snapshot& s) {
  const std::string text = format_progress(s, style_, width_);
  std::fwrite(text.data(), 1, text.size(), out_);
  std::fflush(out_);
  open_line_ = style_ == progress_style::tty;
}

void progress_reporter::finish() {
  if (open_line_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    open_line_ = false;
  }
}

}  // namespace prsgd::cli
