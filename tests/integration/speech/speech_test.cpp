// SPDX-License-Identifier: Apache-2.0
// Runs ops/make-kws-data for real and checks the generator's guarantees and the loader on its output.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.hpp"
#include "prsgd/algorithms/kws_data.hpp"
#include "prsgd/algorithms/log_mel.hpp"
#include "prsgd/algorithms/wav.hpp"

namespace prsgd::algorithms {
namespace {

namespace fs = std::filesystem;
using prsgd::test::read_file;

// Runs the generator with `args`; returns its exit status. Its output goes to the test's log when it
// succeeds and is dropped when `expect_failure` (the refusals below print on purpose).
int generate(const fs::path& out, std::vector<std::string> args, bool expect_failure = false) {
  args.insert(args.begin(), {PRSGD_SOURCE_DIR "/ops/make-kws-data", "--quiet", "--out", out.string()});
  return expect_failure ? prsgd::test::run_quiet(args) : prsgd::test::run(args, {}).status;
}

// Returns the manifest rows as column name -> value maps (no quoted commas in path/split/family).
std::vector<std::map<std::string, std::string>> read_manifest(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string cell; std::getline(hs, cell, ',');) {
    header.push_back(cell);
  }
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    // Only the leading columns (path, word, split, voice, accent, variant, family) are needed: no quotes there.
    std::stringstream ls(line);
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < 7 && i < header.size(); ++i) {
      std::getline(ls, row[header[i]], ',');
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

TEST(SpeechDataTest, GeneratorIsDeterministicForAFixedSeed) {
  prsgd::test::scratch_dir dir{"prsgd-speech"};
  // Same seed with different process counts must give identical bytes; a different seed must not.
  ASSERT_EQ(generate(dir.path() / "a", {"--preset", "tiny", "--sessions", "6", "--seed", "42", "--jobs", "2"}), 0);
  ASSERT_EQ(generate(dir.path() / "b", {"--preset", "tiny", "--sessions", "6", "--seed", "42", "--jobs", "1"}), 0);
  ASSERT_EQ(generate(dir.path() / "c", {"--preset", "tiny", "--sessions", "6", "--seed", "43", "--jobs", "2"}), 0);
  const std::string manifest_a = read_file(dir.path() / "a" / "manifest.csv");
  EXPECT_EQ(manifest_a, read_file(dir.path() / "b" / "manifest.csv"));
  EXPECT_NE(manifest_a, read_file(dir.path() / "c" / "manifest.csv"));
  const auto rows = read_manifest(dir.path() / "a" / "manifest.csv");
  ASSERT_EQ(rows.size(), 6U * 12U);
  for (const auto& row : rows) {
    const std::string a = read_file(dir.path() / "a" / row.at("path"));
    ASSERT_FALSE(a.empty()) << row.at("path");
    ASSERT_EQ(a, read_file(dir.path() / "b" / row.at("path"))) << row.at("path");
  }
}

TEST(SpeechDataTest, GeneratorRejectsBadArguments) {
  prsgd::test::scratch_dir dir{"prsgd-speech"};
  EXPECT_NE(generate(dir.path() / "x", {"--preset", "huge"}, true), 0);
  EXPECT_NE(generate(dir.path() / "x", {"--accents", "en-xx"}, true), 0);
  fs::create_directories(dir.path() / "busy");
  std::ofstream(dir.path() / "busy" / "keep.txt") << "not a data set";
  EXPECT_NE(generate(dir.path() / "busy", {"--sessions", "1"}, true), 0);
  EXPECT_NE(generate(dir.path() / "busy", {"--sessions", "1", "--force"}, true), 0);  // refuses to delete it
  EXPECT_TRUE(fs::exists(dir.path() / "busy" / "keep.txt"));
}

TEST(SpeechDataTest, LoaderReadsGeneratedTinySet) {
  prsgd::test::scratch_dir dir{"prsgd-speech"};
  const fs::path root = dir.path() / "kws-tiny";
  ASSERT_EQ(generate(root, {"--preset", "tiny", "--sessions", "24", "--seed", "1"}), 0);

  // The generator's contract: 12 words, 1 s 16 kHz mono 16-bit clips, test voice families unseen in training.
  const auto rows = read_manifest(root / "manifest.csv");
  ASSERT_EQ(rows.size(), 24U * 12U);
  std::set<std::string> train_families;
  std::set<std::string> test_families;
  std::map<std::string, int> words;
  for (const auto& row : rows) {
    (row.at("split") == "test" ? test_families : train_families).insert(row.at("family"));
    ++words[row.at("word")];
    const auto audio = read_wav(root / row.at("path"));
    ASSERT_TRUE(audio.has_value()) << audio.error().message();
    ASSERT_EQ(audio->size(), 16000U) << row.at("path");
    ASSERT_GT(*std::max_element(audio->begin(), audio->end()), 0.05f) << row.at("path") << " is silent";
  }
  EXPECT_EQ(words.size(), 12U);
  ASSERT_FALSE(test_families.empty());
  for (const auto& f : test_families) {
    EXPECT_EQ(train_families.count(f), 0U) << "voice family " << f << " is in both splits";
  }

  kws_options o;
  o.root = root;
  o.cache_file = dir.path() / "tiny.features";
  const auto data = load_kws(o);
  ASSERT_TRUE(data.has_value()) << data.error().message();
  EXPECT_FALSE(data->from_cache);
  EXPECT_EQ(data->train.size() + data->test.size(), rows.size());
  for (const dataset* d : {&data->train, &data->test}) {
    EXPECT_EQ(d->shape, (std::array<int, 3>{1, 98, 40}));
    EXPECT_EQ(d->num_classes, 12);
    std::set<int> classes(d->labels.begin(), d->labels.end());
    EXPECT_EQ(classes.size(), 12U) << d->name;  // every session speaks all 12 words
    EXPECT_TRUE(std::all_of(d->features.begin(), d->features.end(), [](float v) { return std::isfinite(v); }));
  }
  const auto cached = load_kws(o);
  ASSERT_TRUE(cached.has_value());
  EXPECT_TRUE(cached->from_cache);
  EXPECT_EQ(cached->train.features, data->train.features);
  EXPECT_EQ(cached->test.labels, data->test.labels);

  // The C++ log-mel agrees with the independent numpy reference on real synthesised speech.
  std::vector<std::string> reference{"/usr/bin/python3",
                                     PRSGD_SOURCE_DIR "/tests/integration/algorithms/log_mel_reference.py"};
  std::vector<fs::path> picked;
  const fs::path ref = dir.path() / "reference.txt";
  reference.push_back(ref.string());
  for (std::size_t i = 0; i < rows.size(); i += rows.size() / 3) {
    picked.push_back(root / rows[i].at("path"));
    reference.push_back(picked.back().string());
  }
  ASSERT_EQ(prsgd::test::run(reference, {}).status, 0) << "needs python3-numpy (ops/install-deps.sh)";
  auto mel = log_mel::make();
  ASSERT_TRUE(mel.has_value());
  std::ifstream in(ref);
  double worst = 0.0;
  for (const auto& p : picked) {
    const feature_matrix f = mel->compute(*read_wav(p));
    int r = 0;
    int c = 0;
    ASSERT_TRUE(in >> r >> c);
    ASSERT_EQ(r, f.rows());
    ASSERT_EQ(c, f.cols());
    for (int i = 0; i < r * c; ++i) {
      double want = 0.0;
      ASSERT_TRUE(in >> want);
      worst = std::max(worst, std::abs(want - static_cast<double>(f.data()[i])));
    }
  }
  EXPECT_LT(worst, 1e-4);
}

}  // namespace
}  // namespace prsgd::algorithms
