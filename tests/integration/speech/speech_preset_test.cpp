// SPDX-License-Identifier: Apache-2.0
// The tiny preset of the speech job end to end, the way a newcomer runs it: `PRESET=tiny examples/speech/train`
// makes the keyword set (ops/make-kws-data --preset tiny), fills the feature cache, then trains with the
// settings of examples/speech/kws-tiny.yaml. Well under a minute on two idle cores; the preset aims at 60 % on
// the held-out voices and reaches more (examples/speech/README.md). With a fixed seed every round waits for
// both workers, so the accuracy does not depend on the machine's load; the floor here, 50 %, leaves room for
// another CPU's vector width changing the rounding of the training, and is six times chance (1 in 12).
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "child_process.hpp"
#include "files.hpp"

namespace {

namespace fs = std::filesystem;

TEST(SpeechPresetTest, TinyPresetLearnsTheKeywords) {
  prsgd::test::scratch_dir dir{"prsgd-speech-preset"};
  const fs::path data = dir.path() / "kws-tiny";
  const fs::path logs = dir.path() / "logs";
  const fs::path out = dir.path() / "train.txt";
  const auto run =
      prsgd::test::run({PRSGD_SOURCE_DIR "/examples/speech/train", "--log-dir", logs.string(), "--metrics-jsonl",
                        (logs / "metrics.jsonl").string()},
                       {.out = out.string(),
                        .env = {"PRESET=tiny", "DATA_DIR=" + data.string(), "PRSGD=" PRSGD_BINARY, "PROGRESS=plain"}});
  const std::string text = prsgd::test::read_file(out);
  ASSERT_EQ(run.status, 0) << text << prsgd::test::read_file(logs / "averager.log");
  EXPECT_TRUE(fs::exists(data / "manifest.csv"));
  EXPECT_TRUE(fs::exists(data / "features.cache"));
  // The preset's job file: two workers, 15 epochs of the tiny set.
  EXPECT_NE(text.find("epoch 15.00"), std::string::npos) << text;
  std::smatch m;
  const std::regex done{R"(prsgd local: done: test accuracy ([0-9.]+)% after)"};
  ASSERT_TRUE(std::regex_search(text, m, done)) << text;
  const double accuracy = std::strtod(m[1].str().c_str(), nullptr);
  EXPECT_GE(accuracy, 50.0) << text;
}

}  // namespace
