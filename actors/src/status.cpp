// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/status.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "prsgd/common/json_quote.hpp"

namespace prsgd::actors {
namespace {

// Writes one struct with a `fields` list as a JSON object.
class json_out {
 public:
  explicit json_out(std::string& out) : out_(out) {}

  template <class S>
  void object(const S& s) {
    out_ += '{';
    bool first = true;
    S::fields(s, [&](std::string_view key, const auto& v) {
      if (!first) {
        out_ += ',';
      }
      first = false;
      out_ += json_quote(key);
      out_ += ':';
      value(v);
    });
    out_ += '}';
  }

 private:
  void value(const std::string& v) { out_ += json_quote(v); }
  void value(bool v) { out_ += v ? "true" : "false"; }
  void value(std::uint64_t v) { out_ += std::to_string(v); }
  void value(double v) {
    if (!std::isfinite(v) || v < 0) {
      out_ += "null";  // -1 means unknown
      return;
    }
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out_.append(buf, r.ptr);
  }
  template <class S>
  void value(const std::vector<S>& v) {
    out_ += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0) {
        out_ += ',';
      }
      object(v[i]);
    }
    out_ += ']';
  }

  std::string& out_;
};

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string seconds(double s) {
  if (s < 0) {
    return "-";
  }
  if (s < 10) {
    return fmt("%.2fs", s);
  }
  if (s < 3600) {
    return fmt("%.0fs", s);
  }
  return fmt("%.1fh", s / 3600);
}

std::string bytes(std::uint64_t b) {
  const auto v = static_cast<double>(b);
  if (v >= 1e9) {
    return fmt("%.1fG", v / 1e9);
  }
  if (v >= 1e6) {
    return fmt("%.1fM", v / 1e6);
  }
  if (v >= 1e3) {
    return fmt("%.1fk", v / 1e3);
  }
  return std::to_string(b);
}

// Left-aligns `cells` in columns as wide as their widest cell, two spaces apart.
std::string columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (std::size_t i = 0; i < r.size(); ++i) {
      width[i] = std::max(width[i], r[i].size());
    }
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) {
        line.append(width[i] - r[i].size() + 2, ' ');
      }
    }
    out += line + '\n';
  }
  return out;
}

std::vector<std::string> member_row(const member_status& m) {
  return {std::to_string(m.id),
          m.host.empty() ? "-" : m.host,
          std::to_string(m.incarnation % 100000),
          m.state,
          std::to_string(m.shard),
          std::to_string(m.interval),
          m.steps_per_s > 0 ? fmt("%.1f", m.steps_per_s) : "-",
          seconds(m.idle_last_s),
          seconds(m.idle_mean_s),
          seconds(m.last_seen_s) + " ago",
          bytes(m.bytes_in),
          bytes(m.bytes_out),
          std::to_string(m.late),
          std::to_string(m.rejected)};
}

bool loopback_address(std::string_view a) {
  if (a.starts_with("ipc://") || a.starts_with("inproc://")) {
    return true;
  }
  if (a == "::1" || a == "[::1]" || a == "::ffff:127.0.0.1") {
    return true;
  }
  return a.starts_with("127.") || a.starts_with("::ffff:127.");
}

}  // namespace

std::string to_json(const job_status& s) {
  std::string out;
  json_out{out}.object(s);
  return out;
}

std::string to_table(const job_status& s) {
  std::string out;
  std::string progress = "round " + std::to_string(s.round) + " (" + std::to_string(s.trained_rounds);
  progress += s.rounds_total > 0 ? "/" + std::to_string(s.rounds_total) + " trained)" : " trained)";
  if (s.epoch >= 0) {
    progress += fmt("  epoch %.2f", s.epoch);
  }
  if (s.eta_s >= 0) {
    progress += "  ETA " + seconds(s.eta_s);
  }
  if (s.test_acc >= 0) {
    progress += fmt("  test acc %.1f%%", 100 * s.test_acc);
  }
  if (s.test_loss >= 0) {
    progress += fmt("  test loss %.4f", s.test_loss);
  }
  out += "job       " + (s.model.empty() ? std::string{"-"} : s.model) + "  " + s.state +
         (s.paused && s.state != "paused" ? " (pausing at the barrier)" : "") + "  averager incarnation " +
         std::to_string(s.averager_incarnation) + "\n";
  if (!s.fingerprint.empty()) {
    out += "model     " + s.fingerprint + "\n";
  }
  out += "progress  " + progress + "  up " + seconds(s.wall_s) + "\n";
  out += "rule      " + s.rule + ", aggregation " + s.aggregation + ", interval " + s.interval_policy +
         " I=" + std::to_string(s.interval) + ", deadline " + s.deadline +
         (s.deadline == "fixed" ? " " + seconds(s.deadline_s) : std::string{}) + "\n";
  out += "totals    accepted " + std::to_string(s.accepted) + ", late " + std::to_string(s.late) + ", duplicate " +
         std::to_string(s.duplicate) + ", rejected " + std::to_string(s.rejected) + ", in " + bytes(s.bytes_in) +
         "B, out " + bytes(s.bytes_out) + "B\n\n";
  std::vector<std::vector<std::string>> rows{{"ID", "HOST", "INC", "STATE", "SHARD", "I", "STEPS/S", "IDLE",
                                              "IDLE-MEAN", "LAST-SEEN", "IN", "OUT", "LATE", "REJ"}};
  for (const auto& m : s.members) {
    rows.push_back(member_row(m));
  }
  out += columns(rows);
  if (s.members.empty()) {
    out += "(no members)\n";
  }
  if (!s.pending.empty()) {
    out += "\njoining at the next barrier:\n";
    std::vector<std::vector<std::string>> p{{"ID", "HOST", "INC", "SHARD", "LAST-SEEN"}};
    for (const auto& m : s.pending) {
      p.push_back({std::to_string(m.id), m.host.empty() ? "-" : m.host, std::to_string(m.incarnation % 100000),
                   std::to_string(m.shard), seconds(m.last_seen_s) + " ago"});
    }
    out += columns(p);
  }
  if (!s.removed.empty()) {
    out += "\nrecently removed:\n";
    std::vector<std::vector<std::string>> r{{"ID", "INC", "ROUND", "WHEN", "REASON"}};
    for (const auto& m : s.removed) {
      r.push_back({std::to_string(m.id), std::to_string(m.incarnation % 100000), std::to_string(m.round),
                   seconds(m.ago_s) + " ago", m.reason});
    }
    out += columns(r);
  }
  return out;
}

expected<control_op> parse_control_op(std::string_view name) {
  for (auto op : {control_op::pause, control_op::resume, control_op::remove, control_op::set_interval,
                  control_op::set_policy, control_op::set_deadline, control_op::checkpoint, control_op::stop}) {
    if (name == to_string(op)) {
      return op;
    }
  }
  return fail(errc::invalid_argument, "unknown action '" + std::string{name} +
                                          "' (pause | resume | remove | set-interval | set-policy | set-deadline | "
                                          "checkpoint | stop)");
}

std::string_view to_string(control_op op) noexcept {
  switch (op) {
    case control_op::pause: return "pause";
    case control_op::resume: return "resume";
    case control_op::remove: return "remove";
    case control_op::set_interval: return "set-interval";
    case control_op::set_policy: return "set-policy";
    case control_op::set_deadline: return "set-deadline";
    case control_op::checkpoint: return "checkpoint";
    case control_op::stop: return "stop";
  }
  return "unknown";
}

bool needs_argument(control_op op) noexcept {
  return op == control_op::remove || op == control_op::set_interval || op == control_op::set_policy ||
         op == control_op::set_deadline;
}

bool may_steer(const steering_rule& rule, std::string_view client_key, std::string_view peer_address) {
  if (rule.curve) {
    if (client_key.empty()) {
      return false;
    }
    for (const auto& k : rule.operator_keys) {
      if (k == client_key) {
        return true;
      }
    }
    return false;
  }
  return !peer_address.empty() && loopback_address(peer_address);
}

}  // namespace prsgd::actors
