// SPDX-License-Identifier: Apache-2.0
// `prsgd plot`: the metrics JSON lines read into curves, and the gnuplot script that draws them.
#include "prsgd/cli/plot.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

namespace prsgd::cli {
namespace {

// A JSON number field, or nothing when it is absent, null or not a number.
std::optional<double> number(const YAML::Node& line, const char* key) {
  const YAML::Node v = line[key];
  if (!v || !v.IsScalar()) {
    return std::nullopt;
  }
  double out = 0;
  if (!YAML::convert<double>::decode(v, out)) {
    return std::nullopt;
  }
  return out;
}

std::string default_label(const std::string& file) {
  std::string name = std::filesystem::path{file}.filename().string();
  if (name.size() > 6 && name.ends_with(".jsonl")) {
    name.resize(name.size() - 6);
  }
  return name;
}

// Accumulates one run's curves, line by line.
class run_reader {
 public:
  run_reader(const plot_request& r, std::string label) : r_(r), label_(std::move(label)) {}

  void add(const YAML::Node& line) {
    if (const YAML::Node event = line["event"]; event && event.IsScalar()) {
      if (event.Scalar() == "resumed") {
        wall_offset_ = last_wall_;  // a resumed averager counts its wall time from 0 again
      }
      return;
    }
    const auto round = number(line, "round");
    if (!round) {
      return;
    }
    std::optional<double> x;
    if (r_.x == "round") {
      x = round;
    } else if (r_.x == "rounds") {
      x = number(line, "trained_rounds");
    } else if (r_.x == "epoch") {
      x = number(line, "epoch");
    } else if (const auto wall = number(line, "wall_s")) {
      x = *wall + wall_offset_;
      last_wall_ = *x;
    }
    if (r_.y == "idle") {
      add_idle(line, x);
      return;
    }
    std::optional<double> y;
    if (r_.y == "accuracy") {
      if (const auto acc = number(line, "test_acc")) {
        y = 100.0 * *acc;
      }
    } else if (r_.y == "loss") {
      y = number(line, "train_loss");
    } else {
      bytes_ += number(line, "bytes_in").value_or(0) + number(line, "bytes_out").value_or(0);
      y = bytes_ / 1e6;
    }
    if (x && y) {
      main_.points.emplace_back(*x, *y);
    }
  }

  std::vector<plot_series> finish() {
    const bool dashed = std::find(r_.dashed.begin(), r_.dashed.end(), label_) != r_.dashed.end();
    if (r_.y != "idle") {
      main_.title = label_;
      main_.dashed = dashed;
      return {std::move(main_)};
    }
    std::vector<plot_series> out;
    for (auto& [id, s] : workers_) {
      s.title = label_ + " w" + std::to_string(id);
      s.dashed = dashed;
      out.push_back(std::move(s));
    }
    return out;
  }

  [[nodiscard]] const std::string& label() const noexcept { return label_; }

 private:
  // Each worker's idle time at the barrier so far: round_s minus its arrival offset, over its rounds.
  void add_idle(const YAML::Node& line, const std::optional<double>& x) {
    const YAML::Node arrivals = line["arrival_s"];
    const auto round_s = number(line, "round_s");
    if (!arrivals || !arrivals.IsMap() || !round_s) {
      return;
    }
    for (const auto& kv : arrivals) {
      long id = 0;
      const std::string& key = kv.first.Scalar();
      double arrival = 0;
      if (std::from_chars(key.data(), key.data() + key.size(), id).ec != std::errc{} ||
          !YAML::convert<double>::decode(kv.second, arrival)) {
        continue;
      }
      idle_[id] += std::max(0.0, *round_s - arrival);
      if (x) {
        workers_[id].points.emplace_back(*x, idle_[id]);
      }
    }
  }

  const plot_request& r_;
  std::string label_;
  plot_series main_;
  std::map<long, plot_series> workers_;
  std::map<long, double> idle_;
  double bytes_ = 0;
  double wall_offset_ = 0;
  double last_wall_ = 0;
};

// A gnuplot single-quoted string: only the quote itself needs escaping, by doubling it.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    out += c;
    if (c == '\'') {
      out += '\'';
    }
  }
  return out + "'";
}

std::string axis_label(const std::string& axis) {
  if (axis == "round") {
    return "round";
  }
  if (axis == "rounds") {
    return "rounds trained";
  }
  if (axis == "epoch") {
    return "epoch";
  }
  if (axis == "wall") {
    return "wall time (s)";
  }
  if (axis == "accuracy") {
    return "test accuracy (%)";
  }
  if (axis == "loss") {
    return "training loss";
  }
  if (axis == "idle") {
    return "idle at the barrier, cumulative (s)";
  }
  return "payload bytes in + out, cumulative (MB)";
}

}  // namespace

expected<std::vector<plot_series>> read_plot_series(const plot_request& request) {
  const auto& y = request.y;
  if (y != "accuracy" && y != "loss" && y != "idle" && y != "bytes") {
    return fail(errc::invalid_argument, "--y must be one of accuracy|loss|idle|bytes (got '" + y + "')");
  }
  if (request.x != "round" && request.x != "rounds" && request.x != "epoch" && request.x != "wall") {
    return fail(errc::invalid_argument, "--x must be one of round|rounds|epoch|wall (got '" + request.x + "')");
  }
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < request.runs.size(); ++i) {
    labels.push_back(i < request.labels.size() ? request.labels[i] : default_label(request.runs[i]));
  }
  for (const auto& d : request.dashed) {
    if (std::find(labels.begin(), labels.end(), d) == labels.end()) {
      return fail(errc::invalid_argument, "--dashed '" + d + "' is not the label of any run");
    }
  }
  std::vector<plot_series> out;
  for (std::size_t i = 0; i < request.runs.size(); ++i) {
    const std::string& file = request.runs[i];
    std::ifstream in{file};
    if (!in) {
      return fail(errc::not_found, "cannot read metrics file '" + file + "'");
    }
    run_reader run{request, labels[i]};
    std::string text;
    for (long n = 1; std::getline(in, text); ++n) {
      if (text.find_first_not_of(" \t\r") == std::string::npos) {
        continue;
      }
      YAML::Node line;
      try {
        line = YAML::Load(text);
      } catch (const YAML::Exception&) {
        line = YAML::Node{};
      }
      if (!line.IsMap()) {
        return fail(errc::decode_failed,
                    file + ":" + std::to_string(n) + ": not a JSON object (is it a prsgd --metrics-jsonl file?)");
      }
      run.add(line);
    }
    for (auto& s : run.finish()) {
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::string gnuplot_script(const plot_request& request, const std::vector<plot_series>& series,
                           const std::string& output, const std::string& format, int width, int height,
                           const std::string& title) {
  std::string s;
  const std::string size = std::to_string(width) + "," + std::to_string(height);
  if (format == "svg") {
    s += "set terminal svg size " + size + " noenhanced background rgb 'white'\n";
  } else {
    s += "set terminal pngcairo size " + size + " noenhanced\n";
  }
  s += "set output " + quoted(output) + "\n";
  if (!title.empty()) {
    s += "set title " + quoted(title) + "\n";
  }
  s += "set xlabel " + quoted(axis_label(request.x)) + "\n";
  s += "set ylabel " + quoted(axis_label(request.y)) + "\n";
  s += "set grid\n";
  if (request.log_x) {
    s += "set logscale x\n";
  }
  s += request.y == "loss" ? "set key top right\n" : "set key bottom right\n";
  std::string plot;
  char buf[64];
  for (std::size_t i = 0; i < series.size(); ++i) {
    std::string data;
    for (const auto& [x, y] : series[i].points) {
      if (request.log_x && !(x > 0)) {
        continue;  // no place on a log scale
      }
      std::snprintf(buf, sizeof buf, "%.9g %.9g\n", x, y);
      data += buf;
    }
    if (data.empty()) {
      continue;
    }
    const std::string block = "$s" + std::to_string(i);
    s += block + " << EOD\n" + data + "EOD\n";
    plot += (plot.empty() ? "plot " : ", \\\n     ") + block + " using 1:2 with " +
            (request.y == "accuracy" ? "linespoints pointtype 7 pointsize 0.6" : "lines") + " linewidth 2" +
            (series[i].dashed ? " dashtype 2" : "") + " title " + quoted(series[i].title);
  }
  s += plot + "\n";
  return s;
}

}  // namespace prsgd::cli
