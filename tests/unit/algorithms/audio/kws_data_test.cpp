// SPDX-License-Identifier: Apache-2.0
#include "prsgd/algorithms/kws_data.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "files.hpp"
#include "prsgd/algorithms/wav.hpp"

namespace prsgd::algorithms {
namespace {

namespace fs = std::filesystem;

std::vector<float> tone(std::size_t n, double hz) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(0.3 * std::sin(2.0 * std::numbers::pi * hz * static_cast<double>(i) / 16000.0));
  }
  return x;
}

// A small tree in the Google Speech Commands layout: 3 speakers x {yes, no}, plus a non-keyword word
// and the background-noise folder, both of which the loader must skip.
class KwsDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* word : {"yes", "no", "bed", "_background_noise_"}) {
      fs::create_directories(root() / word);
    }
    for (int s = 0; s < 3; ++s) {
      add("yes", "spk" + std::to_string(s) + "_nohash_0.wav", tone(16000, 300.0 + 100.0 * s));
      add("no", "spk" + std::to_string(s) + "_nohash_0.wav", tone(16000, 2000.0 + 100.0 * s));
    }
    add("bed", "spk0_nohash_0.wav", tone(16000, 500.0));
    add("_background_noise_", "noise.wav", tone(32000, 700.0));
  }
  void add(const std::string& word, const std::string& file, const std::vector<float>& x) {
    ASSERT_TRUE(write_wav(root() / word / file, x, 16000).has_value());
  }
  void write_text(const std::string& name, const std::string& text) { std::ofstream(root() / name) << text; }
  [[nodiscard]] const fs::path& root() const { return dir_.path(); }
  [[nodiscard]] kws_options options() const {
    kws_options o;
    o.root = root();
    return o;
  }
  prsgd::test::scratch_dir dir_{"prsgd-audio"};
};

TEST_F(KwsDataTest, ReadsSpeechCommandsLayoutWithTestingList) {
  write_text("testing_list.txt", "yes/spk1_nohash_0.wav\nno/spk1_nohash_0.wav\n");
  write_text("validation_list.txt", "yes/spk2_nohash_0.wav\n");
  const auto data = load_kws(options());
  ASSERT_TRUE(data.has_value()) << data.error().message();
  EXPECT_FALSE(data->from_cache);
  for (const dataset* d : {&data->train, &data->test}) {
    EXPECT_EQ(d->shape, (std::array<int, 3>{1, 98, 40}));
    EXPECT_EQ(d->num_classes, 12);
    EXPECT_EQ(d->features.size(), d->size() * 98 * 40);
  }
  ASSERT_EQ(data->train.size(), 4U);  // "bed" and _background_noise_ are skipped; validation is train
  ASSERT_EQ(data->test.size(), 2U);
  EXPECT_EQ(data->train.labels, (std::vector<std::int32_t>{0, 1, 0, 1}));  // the words in turn: yes, no, yes, no
  EXPECT_EQ(data->test.labels, (std::vector<std::int32_t>{0, 1}));
  // Within a word the order is by path: test[0] is yes/spk1 (400 Hz); it must equal the features of that tone.
  auto mel = log_mel::make();
  ASSERT_TRUE(mel.has_value());
  const feature_matrix want = mel->compute(*read_wav(root() / "yes" / "spk1_nohash_0.wav"));
  for (std::size_t i = 0; i < data->test.sample_size(); ++i) {
    ASSERT_EQ(data->test.sample(0)[i], want.data()[i]) << i;
  }
}

TEST_F(KwsDataTest, ZeroPadsShortClipsAndTruncatesLongOnes) {
  fs::remove_all(root() / "no");
  fs::remove(root() / "yes" / "spk1_nohash_0.wav");
  fs::remove(root() / "yes" / "spk2_nohash_0.wav");
  std::vector<float> half = tone(8000, 1000.0);
  add("yes", "spk0_nohash_0.wav", half);
  add("yes", "spk1_nohash_0.wav", tone(20000, 1000.0));
  kws_options o = options();
  o.test_percent = 0;
  const auto data = load_kws(o);
  ASSERT_TRUE(data.has_value()) << data.error().message();
  ASSERT_EQ(data->train.size(), 2U);
  auto mel = log_mel::make();
  ASSERT_TRUE(mel.has_value());
  half.resize(16000, 0.0f);
  const std::vector<float> stored_half = [&] {
    auto x = *read_wav(root() / "yes" / "spk0_nohash_0.wav");
    x.resize(16000, 0.0f);
    return x;
  }();
  const feature_matrix padded = mel->compute(stored_half);
  auto cut = *read_wav(root() / "yes" / "spk1_nohash_0.wav");
  cut.resize(16000);
  const feature_matrix truncated = mel->compute(cut);
  for (std::size_t i = 0; i < data->train.sample_size(); ++i) {
    ASSERT_EQ(data->train.sample(0)[i], padded.data()[i]) << i;
    ASSERT_EQ(data->train.sample(1)[i], truncated.data()[i]) << i;
  }
  // The padded tail is silence: the last frame is log(eps) in every band.
  EXPECT_NEAR(padded.row(97).maxCoeff(), std::log(1e-6), 1e-4);
}

TEST_F(KwsDataTest, UsesManifestSplit) {
  write_text("manifest.csv",
             "path,word,split,intonation\n"
             "yes/spk0_nohash_0.wav,yes,test,\",\"\n"
             "yes/spk1_nohash_0.wav,yes,train,.\n"
             "yes/spk2_nohash_0.wav,yes,train,?\n"
             "no/spk0_nohash_0.wav,no,test,\",\"\n"
             "no/spk1_nohash_0.wav,no,train,!\n"
             "no/spk2_nohash_0.wav,no,train,.\n");
  const auto data = load_kws(options());
  ASSERT_TRUE(data.has_value()) << data.error().message();
  EXPECT_EQ(data->train.size(), 4U);
  EXPECT_EQ(data->test.labels, (std::vector<std::int32_t>{0, 1}));
}

TEST_F(KwsDataTest, RejectsManifestWithUnknownSplit) {
  write_text("manifest.csv", "path,split\nyes/spk0_nohash_0.wav,validation\n");
  const auto data = load_kws(options());
  ASSERT_FALSE(data.has_value());
  EXPECT_EQ(data.error().code, errc::decode_failed);
  EXPECT_NE(data.error().context.find("manifest.csv:2"), std::string::npos) << data.error().message();
}

TEST_F(KwsDataTest, HashSplitKeepsEachSpeakerOnOneSide) {
  kws_options o = options();
  o.test_percent = 0;
  auto all_train = load_kws(o);
  ASSERT_TRUE(all_train.has_value());
  EXPECT_EQ(all_train->train.size(), 6U);
  EXPECT_EQ(all_train->test.size(), 0U);
  o.test_percent = 100;
  auto all_test = load_kws(o);
  ASSERT_TRUE(all_test.has_value());
  EXPECT_EQ(all_test->test.size(), 6U);
  // With many speakers and one file per word each, a speaker split puts equally many yes and no in test.
  for (int s = 3; s < 24; ++s) {
    add("yes", "spk" + std::to_string(s) + "_nohash_0.wav", tone(16000, 300.0));
    add("no", "spk" + std::to_string(s) + "_nohash_1.wav", tone(16000, 300.0));
  }
  o.test_percent = 30;
  auto mixed = load_kws(o);
  ASSERT_TRUE(mixed.has_value());
  const auto yes = std::count(mixed->test.labels.begin(), mixed->test.labels.end(), 0);
  const auto no = std::count(mixed->test.labels.begin(), mixed->test.labels.end(), 1);
  EXPECT_EQ(yes, no);
  EXPECT_GT(yes, 0);
  EXPECT_LT(yes, 24);
}

TEST_F(KwsDataTest, CacheIsReusedAndInvalidatedWhenSourcesChange) {
  kws_options o = options();
  o.cache_file = root() / "features.bin";
  const auto first = load_kws(o);
  ASSERT_TRUE(first.has_value()) << first.error().message();
  EXPECT_FALSE(first->from_cache);
  ASSERT_TRUE(fs::exists(o.cache_file));

  const auto second = load_kws(o);
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->train.features, first->train.features);
  EXPECT_EQ(second->train.labels, first->train.labels);
  EXPECT_EQ(second->test.features, first->test.features);
  EXPECT_EQ(second->train.shape, first->train.shape);

  // A changed source (different length, so also a different size) invalidates the cache.
  add("yes", "spk0_nohash_0.wav", tone(12000, 1234.0));
  const auto third = load_kws(o);
  ASSERT_TRUE(third.has_value());
  EXPECT_FALSE(third->from_cache);
  EXPECT_NE(third->train.features, first->train.features);
  EXPECT_TRUE(load_kws(o)->from_cache);

  // A corrupted payload fails the CRC and is recomputed, not trusted and not an error.
  {
    std::fstream f(o.cache_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  const auto fourth = load_kws(o);
  ASSERT_TRUE(fourth.has_value());
  EXPECT_FALSE(fourth->from_cache);
  EXPECT_EQ(fourth->train.features, third->train.features);

  // Different feature options never reuse the cache.
  o.features.num_mels = 20;
  const auto fifth = load_kws(o);
  ASSERT_TRUE(fifth.has_value());
  EXPECT_FALSE(fifth->from_cache);
  EXPECT_EQ(fifth->train.shape, (std::array<int, 3>{1, 98, 20}));
}

TEST_F(KwsDataTest, BadWavFailsNamingTheFile) {
  write_text("no/broken_nohash_0.wav", "garbage");
  const auto data = load_kws(options());
  ASSERT_FALSE(data.has_value());
  EXPECT_EQ(data.error().code, errc::decode_failed);
  EXPECT_NE(data.error().context.find("broken_nohash_0.wav"), std::string::npos) << data.error().message();
}

TEST_F(KwsDataTest, WrongSampleRateFailsNamingTheFile) {
  ASSERT_TRUE(write_wav(root() / "yes" / "fast_nohash_0.wav", tone(8000, 100.0), 8000).has_value());
  const auto data = load_kws(options());
  ASSERT_FALSE(data.has_value());
  EXPECT_EQ(data.error().code, errc::decode_failed);
  EXPECT_NE(data.error().context.find("fast_nohash_0.wav"), std::string::npos) << data.error().message();
}

TEST_F(KwsDataTest, MissingOrEmptyRootIsNotFound) {
  kws_options o;
  o.root = root() / "nope";
  EXPECT_EQ(load_kws(o).error().code, errc::not_found);
  o.root = root() / "bed";  // exists but holds no keyword directories
  EXPECT_EQ(load_kws(o).error().code, errc::not_found);
}

TEST(KwsWordsTest, LabelsFollowTheWordList) {
  EXPECT_EQ(kws_words().size(), 12U);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(kws_label(kws_words()[static_cast<std::size_t>(i)]), i);
  }
  EXPECT_EQ(kws_label("bed"), -1);
  EXPECT_EQ(kws_words()[0], "yes");
  EXPECT_EQ(kws_words()[11], "one");
}

}  // namespace
}  // namespace prsgd::algorithms
