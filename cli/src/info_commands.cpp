// SPDX-License-Identifier: Apache-2.0
// Commands that look at things rather than train: `prsgd plot` (gnuplot), `prsgd models`, `prsgd datasets`
// and the hidden `prsgd completion bash|zsh`.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/algorithms/kws_data.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/cli/plot.hpp"
#include "prsgd/common/json_quote.hpp"

extern char** environ;  // NOLINT: POSIX

namespace prsgd::cli {
namespace {

// ---- plot ----------------------------------------------------------------------------------------------

// Runs `gnuplot SCRIPT`; returns its exit status, or the error when it cannot be started.
expected<int> run_gnuplot(const std::string& script_path) {
  std::vector<std::string> args{"gnuplot", script_path};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, "gnuplot", nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    if (rc == ENOENT) {
      return fail(errc::not_found, "gnuplot is not installed (Debian: apt-get install gnuplot-nox)");
    }
    return fail(errc::io_error, std::string{"cannot start gnuplot: "} + std::strerror(rc));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return fail(errc::io_error, std::string{"waiting for gnuplot: "} + std::strerror(errno));
    }
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Writes `text` to a new temporary file; returns its path.
expected<std::string> write_temp_file(const std::string& text) {
  std::string path = (std::filesystem::temp_directory_path() / "prsgd-plot-XXXXXX").string();
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    return fail(errc::io_error,
                "cannot make a temporary file for the gnuplot script: " + std::string{std::strerror(errno)});
  }
  ::close(fd);
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
  out.close();
  if (!out) {
    std::filesystem::remove(path);
    return fail(errc::io_error, "cannot write the gnuplot script " + path);
  }
  return path;
}

// ---- models and data sets ------------------------------------------------------------------------------

// A data set with the sample shape and class count its models must take, when known.
struct dataset_row {
  std::string name;
  std::string description;
  std::optional<algorithms::model_config> config;
  std::size_t train_size = 0;
  std::string note;  // why the shape is unknown, or where it came from
};

std::string shape_text(const algorithms::shape3& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

std::string thousands(std::size_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      out.push_back(',');
    }
    out.push_back(digits[i]);
  }
  return out;
}

// Every registered data set: its shape read from its files (the default location, or --data-dir for
// --dataset), else the fixed shape of the built-in image and keyword sets, else unknown.
std::vector<dataset_row> dataset_rows(const list_options& o) {
  auto& registry = algorithms::dataset_registry::instance();
  std::vector<dataset_row> rows;
  for (const auto& name : registry.names()) {
    dataset_row row;
    row.name = name;
    row.description = registry.description(name).value_or("");
    algorithms::dataset_request request;
    request.parts = algorithms::dataset_parts::shape;
    if (name == o.dataset) {
      request.dir = o.data_dir;
    }
    auto loaded = registry.load(name, request);
    if (loaded) {
      row.config =
          algorithms::model_config{{loaded->shape[0], loaded->shape[1], loaded->shape[2]}, loaded->num_classes, 1};
      row.train_size = loaded->train_size;
      row.note = request.dir.empty() ? "read from its default location" : "read from " + request.dir.string();
    } else if (name == "fashion-mnist") {
      row.config = algorithms::model_config{{1, 28, 28}, 10, 1};
      row.note = "files not found: " + loaded.error().context;
    } else if (name == "kws") {
      row.config = algorithms::model_config{{1, 98, 40}, algorithms::kws_num_classes, 1};
      row.note = "files not found (make them with ops/make-kws-data)";
    } else {
      row.note = name == o.dataset ? loaded.error().context
                                   : "shape comes from its files (--dataset " + name + " --data-dir DIR)";
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// The data set `--dataset auto` picks for `model`.
std::string auto_dataset(const std::string& model) { return model.starts_with("kws-") ? "kws" : "fashion-mnist"; }

// The data sets `model` builds for, with its parameter count on each; the one --dataset auto picks first.
std::vector<std::pair<std::string, std::size_t>> fits(const std::string& model, const std::vector<dataset_row>& data) {
  std::vector<std::pair<std::string, std::size_t>> out;
  for (const auto& d : data) {
    if (!d.config) {
      continue;
    }
    if (auto m = algorithms::model_registry::instance().make(model, *d.config)) {
      out.emplace_back(d.name, (*m)->num_params());
    }
  }
  std::stable_partition(out.begin(), out.end(), [&](const auto& f) { return f.first == auto_dataset(model); });
  return out;
}

void print_models(const list_options& o, const std::vector<dataset_row>& data) {
  auto& registry = algorithms::model_registry::instance();
  std::ostringstream s;
  if (o.json) {
    s << "[";
    bool first = true;
    for (const auto& name : registry.names()) {
      s << (first ? "" : ",") << "{\"name\":" << json_quote(name)
        << ",\"description\":" << json_quote(registry.description(name).value_or(""))
        << ",\"auto_dataset\":" << json_quote(auto_dataset(name)) << ",\"fits\":[";
      first = false;
      bool first_fit = true;
      for (const auto& [dataset, params] : fits(name, data)) {
        s << (first_fit ? "" : ",") << "{\"dataset\":" << json_quote(dataset) << ",\"parameters\":" << params << "}";
        first_fit = false;
      }
      s << "]}";
    }
    s << "]\n";
    std::fputs(s.str().c_str(), stdout);
    return;
  }
  std::vector<std::vector<std::string>> table{{"MODEL", "FITS (PARAMETERS)", "DESCRIPTION"}};
  for (const auto& name : registry.names()) {
    std::string f;
    for (const auto& [dataset, params] : fits(name, data)) {
      f += (f.empty() ? "" : ", ") + dataset + (dataset == auto_dataset(name) ? "*" : "") + " (" + thousands(params) +
           ")";
    }
    table.push_back({name, f.empty() ? "none of the data sets below" : f, registry.description(name).value_or("")});
  }
  std::size_t w0 = 0;
  std::size_t w1 = 0;
  for (const auto& r : table) {
    w0 = std::max(w0, r[0].size());
    w1 = std::max(w1, r[1].size());
  }
  for (const auto& r : table) {
    s << r[0] << std::string(w0 + 2 - r[0].size(), ' ') << r[1] << std::string(w1 + 2 - r[1].size(), ' ') << r[2]
      << "\n";
  }
  s << "\nChecked against the data sets whose sample shape is known:";
  for (const auto& d : data) {
    if (d.config) {
      s << " " << d.name << " " << shape_text(d.config->input) << "/" << d.config->num_classes;
    }
  }
  s << ".\n* = the data set --dataset auto picks for the model. A model fits a data set when it builds for its "
       "sample shape and classes.\nOthers take their shape from their files: prsgd models --dataset NAME --data-dir "
       "DIR.\n"
       "Besides these names, --model takes a spec: mlp:IN-H-...-OUT or cnn:... (docs/cli.md, \"Model specs\").\n";
  std::fputs(s.str().c_str(), stdout);
}

void print_datasets(const list_options& o, const std::vector<dataset_row>& data) {
  std::ostringstream s;
  if (o.json) {
    s << "[";
    for (std::size_t i = 0; i < data.size(); ++i) {
      const auto& d = data[i];
      s << (i == 0 ? "" : ",") << "{\"name\":" << json_quote(d.name)
        << ",\"description\":" << json_quote(d.description);
      if (d.config) {
        s << ",\"shape\":" << json_quote(shape_text(d.config->input)) << ",\"classes\":" << d.config->num_classes;
      }
      if (d.train_size > 0) {
        s << ",\"train_samples\":" << d.train_size;
      }
      s << ",\"note\":" << json_quote(d.note) << "}";
    }
    s << "]\n";
    std::fputs(s.str().c_str(), stdout);
    return;
  }
  std::size_t w = 7;
  for (const auto& d : data) {
    w = std::max(w, d.name.size());
  }
  char line[96];
  std::snprintf(line, sizeof line, "%-*s  %-9s  %7s  %9s  ", static_cast<int>(w), "DATASET", "SAMPLE", "CLASSES",
                "TRAIN");
  s << line << "DESCRIPTION\n";
  for (const auto& d : data) {
    const std::string shape = d.config ? shape_text(d.config->input) : "-";
    const std::string classes = d.config ? std::to_string(d.config->num_classes) : "-";
    const std::string train = d.train_size > 0 ? std::to_string(d.train_size) : "-";
    std::snprintf(line, sizeof line, "%-*s  %-9s  %7s  %9s  ", static_cast<int>(w), d.name.c_str(), shape.c_str(),
                  classes.c_str(), train.c_str());
    s << line << d.description << "\n";
  }
  s << "\n";
  for (const auto& d : data) {
    s << d.name << ": " << d.note << "\n";
  }
  std::fputs(s.str().c_str(), stdout);
}

// ---- completion ----------------------------------------------------------------------------------------

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    out += (out.empty() ? "" : " ") + w;
  }
  return out;
}

std::string bash_completion(const std::vector<subcommand_info>& subs) {
  std::vector<std::string> names;
  for (const auto& sub : subs) {
    names.push_back(sub.name);
  }
  std::string s =
      "# bash completion for prsgd, generated from its option tables by `prsgd completion bash`.\n"
      "_prsgd() {\n"
      "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
      "  if ((COMP_CWORD == 1)); then\n"
      "    mapfile -t COMPREPLY < <(compgen -W \"" +
      join(names) +
      " --help --version\" -- \"$cur\")\n"
      "    return\n"
      "  fi\n"
      "  local options=\"\"\n"
      "  case \"${COMP_WORDS[1]}\" in\n";
  for (const auto& sub : subs) {
    std::vector<std::string> all;
    std::string values;
    std::vector<std::string> plain_values;
    for (const auto& o : sub.options) {
      all.push_back(o.name);
      if (!o.choices.empty()) {
        values += "        " + o.name + ") mapfile -t COMPREPLY < <(compgen -W \"" + join(o.choices) +
                  "\" -- \"$cur\"); return ;;\n";
      } else if (o.takes_value && !o.path) {
        plain_values.push_back(o.name);
      }
    }
    s += "    " + sub.name + ")\n      case \"$prev\" in\n" + values;
    if (!plain_values.empty()) {
      std::string alternatives;
      for (const auto& v : plain_values) {
        alternatives += (alternatives.empty() ? "" : "|") + v;
      }
      s += "        " + alternatives + ") return ;;\n";
    }
    s += "      esac\n      options=\"" + join(all) + "\" ;;\n";
  }
  s += "  esac\n"
       "  if [[ $cur == -* ]]; then\n"
       "    mapfile -t COMPREPLY < <(compgen -W \"$options\" -- \"$cur\")\n"
       "  fi\n"
       "}\n"
       "complete -o default -F _prsgd prsgd\n";
  return s;
}

// Text inside a zsh _arguments spec in single quotes: [ ] : and ' need escaping.
std::string zsh_text(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else if (c == '[' || c == ']' || c == ':' || c == '\\') {
      out += '\\';
      out += c;
    } else {
      out += c;
    }
  }
  return out;
}

std::string zsh_completion(const std::vector<subcommand_info>& subs) {
  std::string s =
      "#compdef prsgd\n"
      "# zsh completion for prsgd, generated from its option tables by `prsgd completion zsh`.\n"
      "_prsgd() {\n"
      "  local -a subcommands\n"
      "  subcommands=(\n";
  for (const auto& sub : subs) {
    s += "    '" + sub.name + ":" + zsh_text(sub.description) + "'\n";
  }
  s += "  )\n"
       "  if (( CURRENT == 2 )); then\n"
       "    _describe 'subcommand' subcommands\n"
       "    return\n"
       "  fi\n"
       "  local sub=$words[2]\n"
       "  shift words\n"
       "  (( CURRENT-- ))\n"
       "  case $sub in\n";
  for (const auto& sub : subs) {
    s += "    " + sub.name + ")\n      _arguments \\\n";
    for (const auto& o : sub.options) {
      s += "        '*" + o.name + "[" + zsh_text(o.help) + "]";
      if (!o.choices.empty()) {
        s += ":value:(" + join(o.choices) + ")";
      } else if (o.path) {
        s += ":file:_files";
      } else if (o.takes_value) {
        s += ":value: ";
      }
      s += "' \\\n";
    }
    s += "        '*:file:_files' ;;\n";
  }
  s += "  esac\n"
       "}\n"
       "_prsgd \"$@\"\n";
  return s;
}

}  // namespace

int run_plot(const plot_options& o) {
  std::string format = o.format;
  if (format == "auto") {
    format = o.out.ends_with(".svg") ? "svg" : "png";
  }
  plot_request request{o.runs, o.labels, o.y, o.x, o.log_x, o.dashed};
  auto series = read_plot_series(request);
  if (!series) {
    std::fprintf(stderr, "prsgd plot: %s\n", series.error().message().c_str());
    return exit_usage;
  }
  std::size_t drawn = 0;
  for (const auto& s : *series) {
    drawn += std::any_of(s.points.begin(), s.points.end(), [&](const auto& p) { return !o.log_x || p.first > 0; });
  }
  if (drawn == 0) {
    std::fprintf(stderr, "prsgd plot: nothing to draw: no round in %s has a value for --y %s against --x %s\n",
                 o.runs.size() == 1 ? o.runs.front().c_str() : "these files", o.y.c_str(), o.x.c_str());
    return exit_usage;
  }
  if (auto made = make_parent_directory(o.out, "-o"); !made) {
    std::fprintf(stderr, "prsgd plot: %s\n", made.error().message().c_str());
    return exit_failure;
  }
  // gnuplot writes a temporary file that replaces --out only when it succeeded.
  const std::string partial = o.out + ".partial";
  auto script = write_temp_file(gnuplot_script(request, *series, partial, format, o.width, o.height, o.title));
  if (!script) {
    std::fprintf(stderr, "prsgd plot: %s\n", script.error().message().c_str());
    return exit_failure;
  }
  auto status = run_gnuplot(*script);
  std::error_code ec;
  std::filesystem::remove(*script, ec);
  if (!status || *status != 0) {
    std::filesystem::remove(partial, ec);
    if (!status) {
      std::fprintf(stderr, "prsgd plot: %s\n", status.error().message().c_str());
    } else {
      std::fprintf(stderr, "prsgd plot: gnuplot failed (status %d)\n", *status);
    }
    return exit_failure;
  }
  std::filesystem::rename(partial, o.out, ec);
  if (ec) {
    std::fprintf(stderr, "prsgd plot: cannot write %s: %s\n", o.out.c_str(), ec.message().c_str());
    return exit_failure;
  }
  std::printf("wrote %s (%s, %zu curve%s)\n", o.out.c_str(), format.c_str(), drawn, drawn == 1 ? "" : "s");
  return 0;
}

int run_list(const list_options& o) {
  const char* who = o.datasets ? "prsgd datasets" : "prsgd models";
  if (auto p = prepare_process(o.output, {}, o.dataset); !p) {
    std::fprintf(stderr, "%s: %s\n", who, p.error().message().c_str());
    return exit_usage;
  }
  const auto data = dataset_rows(o);
  if (o.datasets) {
    print_datasets(o, data);
  } else {
    print_models(o, data);
  }
  return 0;
}

int run_completion(const completion_options& o) {
  const auto subs = subcommand_options();
  const std::string script = o.shell == "zsh" ? zsh_completion(subs) : bash_completion(subs);
  std::fputs(script.c_str(), stdout);
  return 0;
}

}  // namespace prsgd::cli
