// SPDX-License-Identifier: Apache-2.0
// The `csv` data set: train.csv and test.csv, a label column and numeric feature columns.
#include <charconv>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "dataset_files.hpp"
#include "prsgd/algorithms/datasets.hpp"

namespace prsgd::algorithms {
namespace fs = std::filesystem;

namespace {

enum class header_mode : std::uint8_t { automatic, yes, no };

struct csv_table {
  fs::path file;
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  std::size_t columns = 0;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<float> number(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') {
    s.remove_prefix(1);
  }
  float v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) {
    return std::nullopt;
  }
  return v;
}

bool blank(std::string_view line) { return trim(line).empty(); }

/// Reads one CSV file. `label_column` is a 0-based index, "last" or a header name.
expected<csv_table> read_table(const fs::path& file, const std::string& label_column, header_mode header) {
  csv_table t;
  t.file = file;
  const std::string name = file.string();
  std::ifstream in(file);
  if (!in) {
    std::error_code ec;
    return fail(fs::exists(file, ec) ? errc::io_error : errc::not_found,
                name + ": cannot open (the csv data set needs train.csv and test.csv)");
  }
  std::string line;
  long line_no = 0;
  std::size_t label = 0;
  bool first = true;
  while (std::getline(in, line)) {
    ++line_no;
    if (blank(line)) {
      continue;
    }
    const auto cells = split_csv_line(line);
    const std::string where = name + ":" + std::to_string(line_no);
    if (first) {
      first = false;
      t.columns = cells.size();
      if (t.columns < 2) {
        return fail(errc::decode_failed, where + ": needs a label column and at least one feature column (found " +
                                             std::to_string(t.columns) + " column)");
      }
      bool is_header = header == header_mode::yes;
      if (header == header_mode::automatic) {
        for (const auto& c : cells) {
          is_header = is_header || !number(c);
        }
      }
      // Resolve the label column against this first row.
      if (label_column == "last") {
        label = t.columns - 1;
      } else if (!label_column.empty() && label_column.find_first_not_of("0123456789") == std::string::npos) {
        label = static_cast<std::size_t>(std::stoull(label_column.substr(0, 9)));
        if (label >= t.columns) {
          return fail(errc::invalid_argument, name + ": label-column " + label_column + " is beyond its " +
                                                  std::to_string(t.columns) + " columns");
        }
      } else {
        if (!is_header) {
          return fail(errc::invalid_argument,
                      name + ": label-column '" + label_column + "' names a column, but the file has no header row");
        }
        std::size_t k = 0;
        while (k < cells.size() && std::string{trim(cells[k])} != label_column) {
          ++k;
        }
        if (k == cells.size()) {
          return fail(errc::invalid_argument, name + ": no column named '" + label_column + "' in the header");
        }
        label = k;
      }
      if (is_header) {
        continue;
      }
    }
    if (cells.size() != t.columns) {
      return fail(errc::decode_failed, where + ": " + std::to_string(cells.size()) + " columns, the first row has " +
                                           std::to_string(t.columns));
    }
    for (std::size_t k = 0; k < cells.size(); ++k) {
      const std::string_view cell = trim(cells[k]);
      const std::string col = "column " + std::to_string(k);
      if (cell.empty()) {
        return fail(errc::decode_failed, where + ": " + col + " is empty");
      }
      if (k == label) {
        long long v = 0;
        const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
        if (ec != std::errc{} || end != cell.data() + cell.size()) {
          return fail(errc::decode_failed,
                      where + ": the label ('" + std::string{cell} + "', " + col + ") is not an integer");
        }
        PRSGD_TRY(check_label(v, name, "line " + std::to_string(line_no)));
        t.labels.push_back(static_cast<std::int32_t>(v));
        continue;
      }
      const auto v = number(cell);
      if (!v) {
        return fail(errc::decode_failed, where + ": " + col + " ('" + std::string{cell} + "') is not a number");
      }
      if (!std::isfinite(*v)) {
        return fail(errc::decode_failed, where + ": " + col + " is NaN or infinite");
      }
      t.features.push_back(*v);
    }
  }
  if (in.bad()) {
    return fail(errc::io_error, name + ": read failed");
  }
  if (t.labels.empty()) {
    return fail(errc::decode_failed, name + ": no data rows");
  }
  return t;
}

dataset make_split(csv_table&& t, int features, int classes) {
  dataset d;
  d.features = std::move(t.features);
  d.labels = std::move(t.labels);
  d.shape = {1, 1, features};
  d.num_classes = classes;
  d.name = "csv:" + t.file.string();
  return d;
}

}  // namespace

expected<loaded_dataset> load_csv_dataset(const dataset_request& request) {
  PRSGD_TRY(check_dataset_options(request, "csv", {"label-column", "header", "classes"}));
  if (request.dir.empty()) {
    return fail(errc::invalid_argument, "the csv data set needs --data-dir (a directory with train.csv and test.csv)");
  }
  header_mode header = header_mode::automatic;
  if (auto h = request.options.find("header"); h != request.options.end()) {
    if (h->second == "yes") {
      header = header_mode::yes;
    } else if (h->second == "no") {
      header = header_mode::no;
    } else if (h->second != "auto") {
      return fail(errc::invalid_argument, "--data-option header must be auto, yes or no (got '" + h->second + "')");
    }
  }
  std::string label_column = "0";
  if (auto l = request.options.find("label-column"); l != request.options.end()) {
    if (l->second.empty()) {
      return fail(errc::invalid_argument, "--data-option label-column must not be empty");
    }
    label_column = l->second;
  }
  auto train = read_table(request.dir / "train.csv", label_column, header);
  PRSGD_TRY(train);
  auto test = read_table(request.dir / "test.csv", label_column, header);
  PRSGD_TRY(test);
  if (test->columns != train->columns) {
    return fail(errc::decode_failed, test->file.string() + ": " + std::to_string(test->columns) + " columns, but " +
                                         train->file.string() + " has " + std::to_string(train->columns));
  }
  auto classes = class_count(request, {{&train->labels, train->file.string(), "data row", 1},
                                       {&test->labels, test->file.string(), "data row", 1}});
  PRSGD_TRY(classes);
  const int features = static_cast<int>(train->columns - 1);
  loaded_dataset out;
  out.shape = {1, 1, features};
  out.num_classes = *classes;
  out.train_size = train->labels.size();
  if (request.parts == dataset_parts::train) {
    out.train = make_split(std::move(*train), features, *classes);
  } else if (request.parts == dataset_parts::test_and_train_size) {
    out.train_labels = std::move(train->labels);
    out.test = make_split(std::move(*test), features, *classes);
  }
  return out;
}

}  // namespace prsgd::algorithms
