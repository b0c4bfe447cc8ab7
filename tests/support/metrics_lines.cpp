// SPDX-License-Identifier: Apache-2.0
#include "metrics_lines.hpp"

#include <cstdlib>
#include <fstream>

namespace prsgd::test {
namespace {

// Reads the unsigned integers between `from` and `to` (exclusive) of `text`, in order.
std::vector<std::uint64_t> integers_in(const std::string& text, std::size_t from, std::size_t to) {
  std::vector<std::uint64_t> out;
  std::size_t at = from;
  while (at < to) {
    if (text[at] >= '0' && text[at] <= '9') {
      char* stop = nullptr;
      out.push_back(std::strtoull(text.c_str() + at, &stop, 10));
      at = static_cast<std::size_t>(stop - text.c_str());
    } else {
      ++at;
    }
  }
  return out;
}

}  // namespace

metrics_line parse_metrics_line(const std::string& text) {
  metrics_line out;
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{') {
      ++depth;
    } else if (c == '}') {
      --depth;
    } else if (c == '"' && depth == 1) {
      const auto end = text.find('"', i + 1);
      if (end == std::string::npos || end + 1 >= text.size() || text[end + 1] != ':') {
        i = end == std::string::npos ? text.size() : end;
        continue;
      }
      const std::string key = text.substr(i + 1, end - i - 1);
      std::size_t v = end + 2;
      if (v < text.size() && text[v] == '"') {
        const auto vend = text.find('"', v + 1);
        if (key == "event") {
          out.event = text.substr(v + 1, vend - v - 1);
        }
        i = vend;
      } else if (key == "arrival_s" && v < text.size() && text[v] == '{') {
        const auto close = text.find('}', v);
        std::size_t k = v + 1;
        while (k < close) {
          const auto q1 = text.find('"', k);
          if (q1 == std::string::npos || q1 >= close) {
            break;
          }
          const auto q2 = text.find('"', q1 + 1);
          const int id = std::atoi(text.c_str() + q1 + 1);
          char* stop = nullptr;
          out.arrival[id] = std::strtod(text.c_str() + q2 + 2, &stop);
          k = static_cast<std::size_t>(stop - text.c_str());
        }
        i = close;
      } else if (key == "data" && v < text.size() && text[v] == '[') {
        // [[member, epoch, begin, end], ...]: up to the bracket that closes the list.
        std::size_t close = v;
        int nesting = 0;
        do {
          nesting += text[close] == '[' ? 1 : text[close] == ']' ? -1 : 0;
          ++close;
        } while (close < text.size() && nesting > 0);
        const auto nums = integers_in(text, v, close);
        for (std::size_t k = 0; k + 3 < nums.size(); k += 4) {
          out.data.push_back({nums[k], nums[k + 1], nums[k + 2], nums[k + 3]});
        }
        i = close - 1;
      } else if (v < text.size() && (text[v] == '-' || (text[v] >= '0' && text[v] <= '9'))) {
        char* stop = nullptr;
        out.num[key] = std::strtod(text.c_str() + v, &stop);
        i = static_cast<std::size_t>(stop - text.c_str()) - 1;
      } else {
        i = end + 1;
      }
    }
  }
  return out;
}

std::vector<metrics_line> read_metrics_lines(const std::string& path) {
  std::vector<metrics_line> out;
  std::ifstream in{path};
  std::string text;
  while (std::getline(in, text)) {
    if (!text.empty() && text.back() == '}') {
      out.push_back(parse_metrics_line(text));
    }
  }
  return out;
}

}  // namespace prsgd::test
