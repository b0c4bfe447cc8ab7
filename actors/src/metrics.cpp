// SPDX-License-Identifier: Apache-2.0
#include "prsgd/actors/metrics.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "prsgd/common/file_io.hpp"

namespace prsgd::actors {

namespace {

// Appends a number in the shortest form that reads back exactly; NaN/Inf become null (JSON has neither).
void put_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void put_number(std::string& out, std::uint64_t v) { out += std::to_string(v); }

void put_optional(std::string& out, const std::optional<double>& v) {
  if (v) {
    put_number(out, *v);
  } else {
    out += "null";
  }
}

void key(std::string& out, std::string_view k) {
  if (out.size() > 1) {
    out += ',';
  }
  out += json_quote(k);
  out += ':';
}

}  // namespace

std::string to_json_line(const round_metrics& m) {
  std::string out = "{";
  key(out, "round");
  put_number(out, m.round);
  key(out, "members");
  put_number(out, static_cast<std::uint64_t>(m.members));
  key(out, "submissions");
  put_number(out, static_cast<std::uint64_t>(m.submissions));
  key(out, "samples");
  put_number(out, m.samples);
  key(out, "epoch");
  put_optional(out, m.epoch);
  key(out, "trained_rounds");
  put_number(out, m.trained_rounds);
  key(out, "rounds_total");
  put_number(out, m.rounds_total);
  key(out, "wall_s");
  put_number(out, m.wall_s);
  key(out, "round_s");
  put_number(out, m.round_s);
  key(out, "barrier_wait_s");
  put_number(out, m.barrier_wait_s);
  key(out, "train_loss");
  put_optional(out, m.train_loss);
  key(out, "test_acc");
  put_optional(out, m.test_acc);
  key(out, "test_loss");
  put_optional(out, m.test_loss);
  key(out, "consensus_distance");
  put_number(out, m.consensus_distance);
  key(out, "bytes_in");
  put_number(out, m.bytes_in);
  key(out, "bytes_out");
  put_number(out, m.bytes_out);
  key(out, "late");
  put_number(out, m.late);
  key(out, "duplicate");
  put_number(out, m.duplicate);
  key(out, "rejected");
  put_number(out, m.rejected);
  key(out, "unauthorised");
  put_number(out, m.unauthorised);
  key(out, "removed");
  put_number(out, static_cast<std::uint64_t>(m.removed));
  key(out, "admitted");
  put_number(out, static_cast<std::uint64_t>(m.admitted));
  key(out, "closed_by_deadline");
  out += m.closed_by_deadline ? "true" : "false";
  key(out, "interval_min");
  put_number(out, m.interval_min);
  key(out, "interval_max");
  put_number(out, m.interval_max);
  key(out, "step_size");
  put_number(out, m.step_size);
  key(out, "rule");
  out += json_quote(m.rule);
  key(out, "aggregate");
  out += json_quote(m.aggregate.empty() ? std::string{"none"} : m.aggregate);
  key(out, "refused");
  out += m.refused ? "true" : "false";
  key(out, "screened");
  out += '{';
  for (std::size_t i = 0; i < m.screened.size(); ++i) {
    if (i > 0) {
      out += ',';
    }
    out += json_quote(std::to_string(m.screened[i].first));
    out += ':';
    put_number(out, m.screened[i].second);
  }
  out += '}';
  key(out, "data");
  out += '[';
  for (std::size_t i = 0; i < m.data.size(); ++i) {
    const auto& d = m.data[i];
    out += i > 0 ? ",[" : "[";
    put_number(out, static_cast<std::uint64_t>(d.member));
    out += ',';
    put_number(out, d.epoch);
    out += ',';
    put_number(out, d.begin);
    out += ',';
    put_number(out, d.end);
    out += ']';
  }
  out += ']';
  key(out, "arrival_s");
  out += '{';
  bool first = true;
  for (const auto& [id, s] : m.arrival_offsets_s) {
    if (!first) {
      out += ',';
    }
    first = false;
    out += json_quote(std::to_string(id));
    out += ':';
    put_number(out, s);
  }
  out += "}}";
  return out;
}

void metrics_writer::file_closer::operator()(std::FILE* f) const noexcept { std::fclose(f); }

expected<metrics_writer> metrics_writer::open_resumed(const std::string& path, round_t round) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    auto bytes = read_whole_file(path);
    if (!bytes) {
      return bytes.error();
    }
    const std::string text(bytes->begin(), bytes->end());
    std::string kept;
    kept.reserve(text.size());
    constexpr std::string_view round_prefix = R"({"round":)";
    constexpr std::string_view done_prefix = R"({"event":"done")";
    std::size_t start = 0;
    for (auto nl = text.find('\n'); nl != std::string::npos; start = nl + 1, nl = text.find('\n', start)) {
      const std::string_view line{text.data() + start, nl - start};
      if (line.starts_with(done_prefix)) {
        continue;  // the job was not over after all: the store says so
      }
      if (line.starts_with(round_prefix)) {
        round_t r = 0;
        const auto* first = line.data() + round_prefix.size();
        if (std::from_chars(first, line.data() + line.size(), r).ec == std::errc{} && r >= round) {
          continue;  // runs again in this incarnation
        }
      }
      kept.append(line);
      kept += '\n';
    }
    // Whatever follows the last newline is a line cut short by the crash: dropped.
    if (kept.size() != text.size()) {
      PRSGD_TRY(write_file_atomically(path, std::vector<unsigned char>(kept.begin(), kept.end())));
    }
  }
  return open(path, true);
}

expected<metrics_writer> metrics_writer::open(const std::string& path, bool append) {
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (f == nullptr) {
    return fail(errc::io_error, "cannot open metrics file " + path + ": " + std::strerror(errno));
  }
  return metrics_writer{f};
}

expected<void> metrics_writer::put_line(const std::string& line) {
  if (!file_) {
    return fail(errc::io_error, "metrics writer is closed");
  }
  if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size() || std::fputc('\n', file_.get()) == EOF ||
      std::fflush(file_.get()) != 0) {
    return fail(errc::io_error, std::string("metrics write failed: ") + std::strerror(errno));
  }
  return {};
}

expected<void> metrics_writer::write(const round_metrics& m) { return put_line(to_json_line(m)); }

std::string to_json_line(const control_event& e) {
  std::string out = "{";
  key(out, "event");
  out += json_quote("control");
  key(out, "action");
  out += json_quote(e.action);
  key(out, "arg");
  out += json_quote(e.arg);
  key(out, "ok");
  out += e.ok ? "true" : "false";
  key(out, "result");
  out += json_quote(e.result);
  key(out, "by");
  out += json_quote(e.by);
  key(out, "at_round");
  put_number(out, e.at_round);
  key(out, "wall_s");
  put_number(out, e.wall_s);
  out += '}';
  return out;
}

expected<void> metrics_writer::write(const control_event& e) { return put_line(to_json_line(e)); }

expected<void> metrics_writer::write_resumed(round_t round, std::uint64_t incarnation) {
  std::string out = "{";
  key(out, "event");
  out += json_quote("resumed");
  key(out, "round");
  put_number(out, round);
  key(out, "incarnation");
  put_number(out, incarnation);
  out += '}';
  return put_line(out);
}

expected<void> metrics_writer::write_done(std::optional<double> final_test_acc, std::optional<double> final_test_loss,
                                          round_t rounds, std::uint64_t trained_rounds, double wall_s) {
  std::string out = "{";
  key(out, "event");
  out += json_quote("done");
  key(out, "test_acc");
  put_optional(out, final_test_acc);
  key(out, "test_loss");
  put_optional(out, final_test_loss);
  key(out, "rounds");
  put_number(out, rounds);
  key(out, "trained_rounds");
  put_number(out, trained_rounds);
  key(out, "wall_s");
  put_number(out, wall_s);
  out += '}';
  return put_line(out);
}

}  // namespace prsgd::actors
