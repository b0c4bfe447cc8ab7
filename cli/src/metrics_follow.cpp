// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/metrics_follow.hpp"

#include <cctype>
#include <charconv>
#include <fstream>

namespace prsgd::cli {
namespace {

// A tiny scanner for the flat JSON objects the averager writes, one per line.
class scanner {
 public:
  explicit scanner(std::string_view text) : t_(text) {}

  void ws() {
    while (i_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[i_])) != 0) {
      ++i_;
    }
  }
  bool eat(char c) {
    ws();
    if (i_ < t_.size() && t_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool at_end() {
    ws();
    return i_ >= t_.size();
  }
  std::optional<std::string> string() {
    ws();
    if (i_ >= t_.size() || t_[i_] != '"') {
      return std::nullopt;
    }
    ++i_;
    std::string out;
    while (i_ < t_.size() && t_[i_] != '"') {
      if (t_[i_] == '\\' && i_ + 1 < t_.size()) {
        ++i_;
      }
      out += t_[i_++];
    }
    if (i_ >= t_.size()) {
      return std::nullopt;
    }
    ++i_;
    return out;
  }
  // Parses a value: number -> `num`, string -> `str`, null/true/false -> flags; skips arrays and objects.
  bool value(std::optional<double>& num, std::optional<std::string>& str) {
    ws();
    if (i_ >= t_.size()) {
      return false;
    }
    const char c = t_[i_];
    if (c == '"') {
      str = string();
      return str.has_value();
    }
    if (c == '[' || c == '{') {
      return skip_nested();
    }
    for (std::string_view word : {"null", "true", "false"}) {
      if (t_.substr(i_, word.size()) == word) {
        i_ += word.size();
        if (word == "true") {
          num = 1;
        } else if (word == "false") {
          num = 0;
        }
        return true;
      }
    }
    double v = 0;
    const auto* begin = t_.data() + i_;
    const auto [ptr, ec] = std::from_chars(begin, t_.data() + t_.size(), v);
    if (ec != std::errc{}) {
      return false;
    }
    i_ += static_cast<std::size_t>(ptr - begin);
    num = v;
    return true;
  }

 private:
  bool skip_nested() {
    int depth = 0;
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '"') {
        if (!string()) {
          return false;
        }
        continue;
      }
      if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ']' || c == '}') {
        --depth;
      }
      ++i_;
      if (depth == 0) {
        return true;
      }
    }
    return false;
  }

  std::string_view t_;
  std::size_t i_ = 0;
};

}  // namespace

std::optional<metrics_line> parse_metrics_line(std::string_view line) {
  scanner s{line};
  if (!s.eat('{')) {
    return std::nullopt;
  }
  metrics_line out;
  if (s.eat('}')) {
    return s.at_end() ? std::optional<metrics_line>{out} : std::nullopt;
  }
  while (true) {
    auto key = s.string();
    if (!key || !s.eat(':')) {
      return std::nullopt;
    }
    std::optional<double> num;
    std::optional<std::string> str;
    if (!s.value(num, str)) {
      return std::nullopt;
    }
    if (*key == "event") {
      out.done = str && *str == "done";
    } else if (num) {
      if (*key == "round") {
        out.round = static_cast<long>(*num);
      } else if (*key == "rounds" || (*key == "rounds_total" && *num > 0)) {
        out.rounds = static_cast<long>(*num);
      } else if (*key == "members") {
        out.members = static_cast<int>(*num);
      } else if (*key == "wall_s") {
        out.wall_s = *num;
      } else if (*key == "train_loss") {
        out.train_loss = *num;
      } else if (*key == "test_acc") {
        out.test_acc = *num;
      } else if (*key == "epoch") {
        out.epoch = *num;
      } else if (*key == "samples") {
        out.samples = *num;
      } else if (*key == "bytes_in") {
        out.bytes_in = *num;
      } else if (*key == "bytes_out") {
        out.bytes_out = *num;
      }
    }
    if (s.eat(',')) {
      continue;
    }
    if (s.eat('}')) {
      break;
    }
    return std::nullopt;
  }
  if (!s.at_end()) {
    return std::nullopt;
  }
  return out;
}

void apply_metrics_line(progress_snapshot& s, const metrics_line& m) {
  const double previous_wall = s.elapsed_s;
  if (m.rounds) {
    s.total_rounds = *m.rounds;
    if (m.done) {
      s.round = *m.rounds;
    }
  }
  if (m.round) {
    // Round r closed means r + 1 rounds are complete.
    s.round = *m.round + 1;
  }
  if (m.members) {
    s.members = *m.members;
  }
  if (m.train_loss) {
    s.train_loss = m.train_loss;
  }
  if (m.test_acc) {
    s.test_acc = m.test_acc;
  }
  if (m.epoch) {
    s.epoch = *m.epoch;
  }
  if (m.wall_s) {
    s.elapsed_s = *m.wall_s;
    if (m.samples && *m.wall_s > previous_wall) {
      s.samples_per_s = *m.samples / (*m.wall_s - previous_wall);
    }
  }
}

std::vector<std::string> metrics_follower::poll() {
  std::vector<std::string> lines;
  std::ifstream in{path_, std::ios::binary};
  if (!in) {
    return lines;
  }
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  if (size < offset_) {
    offset_ = 0;  // truncated: a new run
    partial_.clear();
  }
  if (size == offset_) {
    return lines;
  }
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string chunk(static_cast<std::size_t>(size - offset_), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  chunk.resize(static_cast<std::size_t>(in.gcount()));
  offset_ += chunk.size();
  partial_ += chunk;
  std::size_t start = 0;
  for (auto nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n', start)) {
    lines.push_back(partial_.substr(start, nl - start));
    start = nl + 1;
  }
  partial_.erase(0, start);
  return lines;
}

}  // namespace prsgd::cli
