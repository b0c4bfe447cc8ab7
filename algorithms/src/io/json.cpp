// SPDX-License-Identifier: Apache-2.0
#include "json.hpp"

#include <set>

#include "prsgd/common/json_quote.hpp"

namespace prsgd::algorithms::json {

value::value() = default;
value::value(const value&) = default;
value::value(value&&) noexcept = default;
value& value::operator=(const value&) = default;
value& value::operator=(value&&) noexcept = default;
value::~value() = default;

namespace {

constexpr int max_depth = 64;

class parser {
 public:
  explicit parser(std::string_view text) : s_(text) {}

  expected<value> run() {
    value v;
    PRSGD_TRY(parse_value(v, 0));
    skip_ws();
    if (pos_ != s_.size()) {
      return bad("trailing characters after the JSON value");
    }
    return v;
  }

 private:
  unexpected bad(const std::string& what) const {
    return fail(errc::decode_failed, "JSON: " + what + " at byte " + std::to_string(pos_));
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) == word) {
      pos_ += word.size();
      return true;
    }
    return false;
  }

  expected<void> parse_value(value& v, int depth) {
    if (depth > max_depth) {
      return bad("nesting deeper than " + std::to_string(max_depth));
    }
    skip_ws();
    if (pos_ >= s_.size()) {
      return bad("unexpected end");
    }
    const char c = s_[pos_];
    if (c == '{') {
      return parse_object(v, depth);
    }
    if (c == '[') {
      return parse_array(v, depth);
    }
    if (c == '"') {
      v.type = value::kind::string;
      return parse_string(v.text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      return parse_number(v);
    }
    if (literal("true")) {
      v.type = value::kind::boolean;
      v.boolean = true;
      return {};
    }
    if (literal("false")) {
      v.type = value::kind::boolean;
      return {};
    }
    if (literal("null")) {
      v.type = value::kind::null;
      return {};
    }
    return bad(std::string("unexpected character '") + c + "'");
  }

  expected<void> parse_object(value& v, int depth) {
    v.type = value::kind::object;
    ++pos_;  // {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return {};
    }
    std::set<std::string, std::less<>> keys;
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') {
        return bad("expected a string key");
      }
      std::string key;
      PRSGD_TRY(parse_string(key));
      if (!keys.insert(key).second) {
        return bad("duplicate key " + json_quote(key));
      }
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') {
        return bad("expected ':'");
      }
      ++pos_;
      value member;
      PRSGD_TRY(parse_value(member, depth + 1));
      v.members.emplace_back(std::move(key), std::move(member));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return {};
      }
      return bad("expected ',' or '}'");
    }
  }

  expected<void> parse_array(value& v, int depth) {
    v.type = value::kind::array;
    ++pos_;  // [
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return {};
    }
    while (true) {
      value item;
      PRSGD_TRY(parse_value(item, depth + 1));
      v.items.push_back(std::move(item));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return {};
      }
      return bad("expected ',' or ']'");
    }
  }

  expected<void> parse_number(value& v) {
    const std::size_t start = pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        ++pos_;
      }
      return pos_ - from;
    };
    if (s_[pos_] == '-') {
      ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      return bad("bad number");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) {
        return bad("bad number");
      }
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) {
        ++pos_;
      }
      if (digits() == 0) {
        return bad("bad number");
      }
    }
    v.type = value::kind::number;
    v.text = std::string(s_.substr(start, pos_ - start));
    return {};
  }

  expected<unsigned> hex4() {
    if (s_.size() - pos_ < 4) {
      return bad("short \\u escape");
    }
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      code <<= 4U;
      if (c >= '0' && c <= '9') {
        code |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        code |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        code |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        return bad("bad \\u escape");
      }
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6U));
      out += static_cast<char>(0x80 | (cp & 0x3FU));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12U));
      out += static_cast<char>(0x80 | ((cp >> 6U) & 0x3FU));
      out += static_cast<char>(0x80 | (cp & 0x3FU));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18U));
      out += static_cast<char>(0x80 | ((cp >> 12U) & 0x3FU));
      out += static_cast<char>(0x80 | ((cp >> 6U) & 0x3FU));
      out += static_cast<char>(0x80 | (cp & 0x3FU));
    }
  }

  expected<void> parse_string(std::string& out) {
    ++pos_;  // "
    while (true) {
      if (pos_ >= s_.size()) {
        return bad("unterminated string");
      }
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return {};
      }
      if (c < 0x20) {
        return bad("control character in a string");
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= s_.size()) {
        return bad("unterminated escape");
      }
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          auto hi = hex4();
          if (!hi) {
            return hi.error();
          }
          unsigned cp = *hi;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!literal("\\u")) {
              return bad("unpaired surrogate");
            }
            auto lo = hex4();
            if (!lo) {
              return lo.error();
            }
            if (*lo < 0xDC00 || *lo > 0xDFFF) {
              return bad("unpaired surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10U) + (*lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return bad("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: return bad(std::string("bad escape \\") + e);
      }
    }
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

}  // namespace

const value* value::find(std::string_view key) const {
  for (const auto& [k, v] : members) {
    if (k == key) {
      return &v;
    }
  }
  return nullptr;
}

std::optional<std::uint64_t> value::as_uint() const {
  if (type != kind::number || text.empty() || text.size() > 20) {
    return std::nullopt;
  }
  std::uint64_t n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;  // negative, fraction or exponent
    }
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (n > (UINT64_MAX - d) / 10) {
      return std::nullopt;
    }
    n = n * 10 + d;
  }
  return n;
}

expected<value> parse(std::string_view text) { return parser{text}.run(); }

}  // namespace prsgd::algorithms::json
