// SPDX-License-Identifier: Apache-2.0
// The `prsgd` commands that look at things, as processes: plot (gnuplot's real PNG and SVG), models,
// datasets, the generated shell completion and man pages, and --help against docs/cli.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "files.hpp"

namespace {

using prsgd::test::run_result;

class InfoCommandsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_ / name; }

  run_result run(const std::vector<std::string>& args) {
    return prsgd::test::run(prsgd::test::command(PRSGD_BINARY, args),
                            {.cwd = dir_.path(), .out = path("stdout.txt"), .err = path("stderr.txt")});
  }

  run_result bash(const std::string& script) {
    return prsgd::test::run({"/bin/bash", "-c", script},
                            {.cwd = dir_.path(), .out = path("sh-out.txt"), .err = path("sh-err.txt")});
  }

  // A run of `workers` workers over `rounds` rounds, evaluated every second round.
  std::string metrics_file(const std::string& name, int workers, int rounds) {
    std::ofstream out{path(name)};
    for (int r = 0; r < rounds; ++r) {
      out << R"({"round":)" << r << R"(,"epoch":)" << (r + 1) * 0.25 << R"(,"wall_s":)" << r + 1
          << R"(,"round_s":1.0,"train_loss":)" << 2.0 / (r + 1) << R"(,"test_acc":)"
          << (r % 2 == 1 ? std::to_string(0.5 + 0.01 * r) : "null")
          << R"(,"bytes_in":2000,"bytes_out":1000,"arrival_s":{)";
      for (int w = 0; w < workers; ++w) {
        out << (w == 0 ? "" : ",") << '"' << w << R"(":)" << 0.2 * (w + 1);
      }
      out << "}}\n";
    }
    out << R"({"event":"done","test_acc":0.6,"rounds":)" << rounds << R"(,"wall_s":)" << rounds << "}\n";
    return path(name);
  }

  static bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

  prsgd::test::scratch_dir dir_{"prsgd-info"};
};

std::uint32_t big_endian(const std::string& bytes, std::size_t at) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  }
  return v;
}

// The option names at the start of --help's option lines: "  -o,--out FILE" and "  --lr FLOAT".
std::set<std::string> help_options(const std::string& help) {
  std::set<std::string> out;
  const std::regex line{R"(^\s+(?:-\w,\s*)?(--[a-z0-9][a-z0-9-]*))"};
  for (const auto& l : prsgd::test::lines_of(help)) {
    std::smatch m;
    if (std::regex_search(l, m, line)) {
      out.insert(m[1]);
    }
  }
  return out;
}

TEST_F(InfoCommandsTest, PlotWritesAValidPngOfTheAskedSize) {
  const auto a = metrics_file("i4.jsonl", 2, 8);
  const auto b = metrics_file("i16.jsonl", 2, 6);
  // A --label takes one value: the file after it is the next run.
  auto r =
      run({"plot", a, "--label", "I=4", b, "--label", "I=16", "-o", "acc.png", "--width", "640", "--height", "400"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "2 curves")) << r.out;
  const std::string png = prsgd::test::read_file(path("acc.png"));
  ASSERT_GT(png.size(), 33u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(big_endian(png, 16), 640u);
  EXPECT_EQ(big_endian(png, 20), 400u);
  EXPECT_FALSE(std::filesystem::exists(path("acc.png.partial")));
}

TEST_F(InfoCommandsTest, SvgHasOneSeriesPerRunAndWorker) {
  const auto a = metrics_file("a.jsonl", 3, 5);
  const auto b = metrics_file("b.jsonl", 2, 5);
  for (const auto& [y, x, expected] : std::vector<std::tuple<std::string, std::string, int>>{
           {"idle", "wall", 5}, {"accuracy", "epoch", 2}, {"loss", "round", 2}, {"bytes", "wall", 2}}) {
    const std::string out = "fig-" + y + ".svg";
    auto r = run({"plot", a, b, "--y", y, "--x", x, "-o", out, "--title", "runs a and b"});
    ASSERT_EQ(r.status, 0) << y << ": " << r.err;
    const std::string svg = prsgd::test::read_file(path(out));
    EXPECT_TRUE(has(svg, "<svg")) << y;
    int series = 0;
    for (auto at = svg.find("<g id=\"gnuplot_plot_"); at != std::string::npos;
         at = svg.find("<g id=\"gnuplot_plot_", at + 1)) {
      ++series;
    }
    EXPECT_EQ(series, expected) << y << " against " << x;
  }
  const std::string idle = prsgd::test::read_file(path("fig-idle.svg"));
  EXPECT_TRUE(has(idle, "a w2") && has(idle, "b w1")) << "legend titles";
}

TEST_F(InfoCommandsTest, PlotRefusesBadInputInOneLine) {
  const auto a = metrics_file("a.jsonl", 1, 2);
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"plot", "-o", "x.png"},
                                             {"plot", a},
                                             {"plot", a, "--y", "speed", "-o", "x.png"},
                                             {"plot", "missing.jsonl", "-o", "x.png"},
                                             {"plot", a, "--label", "p", "--label", "q", "-o", "x.png"}}) {
    auto r = run(args);
    EXPECT_EQ(r.status, 2) << args.back() << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  std::ofstream{path("text.jsonl")} << "not json\n";
  auto r = run({"plot", "text.jsonl", "-o", "x.png"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "text.jsonl:1")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(path("x.png")));
}

TEST_F(InfoCommandsTest, ModelsListParametersAndTheDataTheyFit) {
  auto r = run({"models"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(r.out, "fmnist-mlp")) << r.out;
  EXPECT_TRUE(has(r.out, "fashion-mnist* (535,818)")) << r.out;
  // kws-cnn fits the keyword features, not 28x28 images.
  for (const auto& l : prsgd::test::lines_of(r.out)) {
    if (l.rfind("kws-cnn", 0) == 0) {
      EXPECT_TRUE(has(l, "  kws* (")) << "kws first, as the data set --dataset auto picks: " << l;
    }
    if (l.rfind("fmnist-cnn", 0) == 0) {
      EXPECT_TRUE(has(l, "  fashion-mnist* (")) << l;
    }
  }
  auto j = run({"models", "--json"});
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_TRUE(has(j.out, R"({"name":"fmnist-cnn")")) << j.out;
  EXPECT_TRUE(has(j.out, R"("parameters":535818)")) << j.out;

  auto plugin = run({"models", "--plugin", PRSGD_TEST_PLUGIN_REGISTERS_MODEL});
  ASSERT_EQ(plugin.status, 0) << plugin.err;
  EXPECT_GT(prsgd::test::lines_of(plugin.out).size(), prsgd::test::lines_of(r.out).size()) << plugin.out;
}

TEST_F(InfoCommandsTest, DatasetsListShapesAndReadFilesGiven) {
  auto r = run({"datasets"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* name : {"fashion-mnist", "kws", "npy", "csv", "wav-folder"}) {
    EXPECT_TRUE(has(r.out, name)) << name << "\n" << r.out;
  }
  EXPECT_TRUE(has(r.out, "1x28x28")) << r.out;
  EXPECT_TRUE(has(r.out, "1x98x40")) << r.out;

  std::filesystem::create_directories(path("tab"));
  std::ofstream{path("tab/train.csv")} << "label,a,b,c\n0,1,2,3\n1,4,5,6\n2,7,8,9\n";
  std::ofstream{path("tab/test.csv")} << "label,a,b,c\n1,1,2,3\n";
  auto csv = run({"models", "--dataset", "csv", "--data-dir", "tab"});
  ASSERT_EQ(csv.status, 0) << csv.err;
  auto csv_sets = run({"datasets", "--dataset", "csv", "--data-dir", "tab", "--json"});
  ASSERT_EQ(csv_sets.status, 0) << csv_sets.err;
  EXPECT_TRUE(has(csv_sets.out, R"({"name":"csv")")) << csv_sets.out;
  EXPECT_TRUE(has(csv_sets.out, R"("shape":"1x1x3","classes":3)")) << csv_sets.out;

  auto unknown = run({"datasets", "--dataset", "nope"});
  EXPECT_EQ(unknown.status, 2) << unknown.err;
}

TEST_F(InfoCommandsTest, BashCompletionCompletesSubcommandsOptionsAndValues) {
  ASSERT_EQ(run({"completion", "bash"}).status, 0);
  std::filesystem::copy_file(path("stdout.txt"), path("prsgd.bash"));
  const auto complete = [&](const std::string& words, int cword) {
    return bash("set -e; source ./prsgd.bash; COMP_WORDS=(" + words + "); COMP_CWORD=" + std::to_string(cword) +
                "; _prsgd; printf '%s\\n' \"${COMPREPLY[@]}\"");
  };
  auto sub = complete("prsgd lo", 1);
  ASSERT_EQ(sub.status, 0) << sub.err;
  EXPECT_EQ(prsgd::test::lines_of(sub.out), std::vector<std::string>{"local"});
  auto opt = complete("prsgd local --interval-p", 2);
  EXPECT_EQ(prsgd::test::lines_of(opt.out), std::vector<std::string>{"--interval-policy"}) << opt.err;
  auto value = complete("prsgd averager --progress ''", 3);
  EXPECT_EQ(prsgd::test::lines_of(value.out), (std::vector<std::string>{"auto", "plain", "off"})) << value.err;
  auto plot = complete("prsgd plot --y ''", 3);
  EXPECT_EQ(prsgd::test::lines_of(plot.out), (std::vector<std::string>{"accuracy", "loss", "idle", "bytes"}));
  // Workers take --metrics-jsonl and ignore it: it is not offered.
  auto worker = complete("prsgd worker --metrics", 2);
  EXPECT_TRUE(prsgd::test::lines_of(worker.out).empty()) << worker.out;
  auto hidden = complete("prsgd comp", 1);
  EXPECT_TRUE(prsgd::test::lines_of(hidden.out).empty()) << "the hidden subcommand is offered: " << hidden.out;
}

TEST_F(InfoCommandsTest, ZshCompletionParses) {
  if (prsgd::test::run_quiet(prsgd::test::shell("command -v zsh")) != 0) {
    GTEST_SKIP() << "zsh is not installed";
  }
  ASSERT_EQ(run({"completion", "zsh"}).status, 0);
  std::filesystem::copy_file(path("stdout.txt"), path("_prsgd"));
  auto r = bash("zsh -n _prsgd");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(has(prsgd::test::read_file(path("_prsgd")), "'*--interval-policy[")) << "options listed";
  EXPECT_EQ(run({"completion", "fish"}).status, 2);
}

TEST_F(InfoCommandsTest, ManPagesRenderAndAreInstalledWithTheCompletion) {
#if defined(PRSGD_MAN_DIR) && defined(PRSGD_CLI_INSTALL_SCRIPT)
  if (prsgd::test::run_quiet(prsgd::test::shell("command -v man")) != 0) {
    GTEST_SKIP() << "man is not installed";
  }
  for (const std::string page : {"prsgd", "prsgd-local", "prsgd-plot", "prsgd-worker"}) {
    auto r = bash("MANWIDTH=100 man -l '" + std::string{PRSGD_MAN_DIR} + "/" + page + ".1' | cat");
    EXPECT_EQ(r.status, 0) << page << ": " << r.err;
    EXPECT_TRUE(has(r.out, "NAME")) << page << ":\n" << r.out;
    if (page == "prsgd-local") {
      EXPECT_TRUE(has(r.out, "--interval-policy")) << r.out;
    }
  }
  const std::string install = prsgd::test::read_file(PRSGD_CLI_INSTALL_SCRIPT);
  for (const char* where : {"bash-completion/completions", "zsh/vendor-completions", "man1", "prsgd-plot.1"}) {
    EXPECT_TRUE(has(install, where)) << "cmake --install does not install " << where;
  }
#else
  GTEST_SKIP() << "built without help2man: no man pages";
#endif
}

TEST_F(InfoCommandsTest, HelpAndDocsNameTheSameOptions) {
  const std::string docs = prsgd::test::read_file(std::string{PRSGD_SOURCE_DIR} + "/docs/cli.md");
  ASSERT_FALSE(docs.empty());
  auto top = run({"--help"});
  ASSERT_EQ(top.status, 0);
  std::vector<std::string> subs;
  bool in_subcommands = false;
  for (const auto& l : prsgd::test::lines_of(top.out)) {
    if (l.rfind("Subcommands:", 0) == 0 || l.rfind("SUBCOMMANDS:", 0) == 0) {
      in_subcommands = true;
      continue;
    }
    if (l.empty() || l[0] != ' ') {
      in_subcommands = false;  // the footer
    }
    std::smatch m;
    if (in_subcommands && std::regex_search(l, m, std::regex{R"(^\s+([a-z]+)\s)"})) {
      subs.push_back(m[1]);
    }
  }
  ASSERT_GE(subs.size(), 11u) << top.out;
  EXPECT_TRUE(std::find(subs.begin(), subs.end(), "completion") == subs.end()) << "hidden";
  // An option is documented when docs/cli.md names it as a whole word: `--lr X`, [--name NAME], --x|--y.
  const auto documented = [&](const std::string& opt) {
    for (auto at = docs.find(opt); at != std::string::npos; at = docs.find(opt, at + 1)) {
      const std::size_t end = at + opt.size();
      const bool whole =
          end == docs.size() || (std::isalnum(static_cast<unsigned char>(docs[end])) == 0 && docs[end] != '-');
      if (whole && (at == 0 || std::isalnum(static_cast<unsigned char>(docs[at - 1])) == 0)) {
        return true;
      }
    }
    return false;
  };
  int checked = 0;
  for (const auto& sub : subs) {
    EXPECT_TRUE(has(docs, "prsgd " + sub)) << "docs/cli.md never shows `prsgd " << sub << "`";
    auto h = run({sub, "--help"});
    ASSERT_EQ(h.status, 0) << sub;
    for (const auto& opt : help_options(h.out)) {
      if (opt == "--help") {
        continue;
      }
      ++checked;
      EXPECT_TRUE(documented(opt)) << "prsgd " << sub << " --help lists " << opt << ", docs/cli.md does not";
    }
  }
  EXPECT_GT(checked, 100);
}

TEST_F(InfoCommandsTest, RolesDoNotListOptionsTheyIgnoreButAcceptThem) {
  auto worker = run({"worker", "--help"});
  auto head = run({"head", "--help"});
  auto averager = run({"averager", "--help"});
  const auto w = help_options(worker.out);
  const auto h = help_options(head.out);
  const auto a = help_options(averager.out);
  for (const char* opt : {"--metrics-jsonl", "--metrics-port", "--metrics-bind", "--progress", "--curve-allow"}) {
    EXPECT_EQ(w.count(opt), 0u) << "worker lists " << opt;
  }
  for (const char* opt : {"--metrics-jsonl", "--metrics-port", "--metrics-bind", "--progress", "--curve-server-key"}) {
    EXPECT_EQ(h.count(opt), 0u) << "head lists " << opt;
  }
  for (const char* opt : {"--metrics-jsonl", "--metrics-port", "--metrics-bind", "--progress", "--curve-allow",
                          "--curve-server-key", "--curve-public-key"}) {
    EXPECT_EQ(a.count(opt), 1u) << "averager misses " << opt;
  }
  EXPECT_TRUE(has(averager.out, "a new job truncates it")) << averager.out;
  // Accepted all the same, so one config file or script line serves every role: the worker gets as far as
  // looking for its averager's endpoint.
  auto r = run({"worker", "--progress", "plain", "--metrics-jsonl", "m.jsonl"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.err, "--averager")) << r.err;
}

TEST_F(InfoCommandsTest, MetricsBindIsCheckedInOneLine) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"averager", "--listen", "tcp://127.0.0.1:*", "--metrics-bind", "0.0.0.0"},
           {"averager", "--listen", "tcp://127.0.0.1:*", "--metrics-bind", "somehost:9400"},
           {"averager", "--listen", "tcp://127.0.0.1:*", "--metrics-bind", "127.0.0.1:70000"},
           {"averager", "--listen", "tcp://127.0.0.1:*", "--metrics-bind", "127.0.0.1:9400", "--metrics-port",
            "9401"}}) {
    auto r = run(args);
    EXPECT_EQ(r.status, 2) << args.back() << ": " << r.err;
    EXPECT_TRUE(has(r.err, "--metrics-")) << r.err;
  }
}

}  // namespace
