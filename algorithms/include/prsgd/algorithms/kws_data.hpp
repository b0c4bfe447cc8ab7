// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "prsgd/algorithms/dataset.hpp"
#include "prsgd/algorithms/log_mel.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::algorithms {

/// Number of keyword classes.
inline constexpr int kws_num_classes = 12;

/// Returns the 12 keywords in label order: yes no up down left right on off stop go zero one.
[[nodiscard]] const std::array<std::string_view, kws_num_classes>& kws_words() noexcept;

/// Returns the label of `word`, or -1 if it is not one of the 12 keywords.
[[nodiscard]] int kws_label(std::string_view word) noexcept;

/// Says where a keyword data set is and how to featurise and split it.
struct kws_options {
  /// Root with one directory per word: `<root>/<word>/*.wav` (16 kHz mono 16-bit). Directories that are
  /// not one of the 12 keywords (other words, `_background_noise_`) are skipped.
  std::filesystem::path root;
  /// Binary feature cache; empty disables caching. It is reused only if its header matches the current
  /// sources (relative paths, sizes and modification times of every WAV and split file), the feature
  /// options and the split rule, and its CRC-32 checks; otherwise features are recomputed and rewritten.
  std::filesystem::path cache_file;
  /// Feature parameters; each clip is zero-padded or cut to `clip_samples` first.
  log_mel_options features;
  /// Samples per clip (16000 = 1 s): shorter files are zero-padded at the end, longer ones truncated.
  int clip_samples = 16000;
  /// Percentage of speakers put in the test split when the root has neither manifest.csv nor
  /// testing_list.txt (speaker = file name before "_nohash_", hashed with FNV-1a).
  int test_percent = 10;
};

/// Holds the two splits of a keyword data set (or of any clip set, see featurise_clips).
struct kws_data {
  /// Training samples, shape {1, frames, mels} (98 x 40 by default), 12 classes.
  dataset train;
  /// Test samples, same shape; in a make-kws-data set its voice families never occur in `train`.
  dataset test;
  /// True when the features came from the cache file.
  bool from_cache = false;
};

/// Describes one clip of a labelled clip set (featurise_clips).
struct labelled_clip {
  /// Path relative to the set's root, '/'-separated; the cache fingerprint and the sample order use it.
  std::string rel;
  /// Path to read.
  std::filesystem::path file;
  /// Class index in [0, clip_set_options::num_classes).
  int label = 0;
  /// True for the test split.
  bool test = false;
};

/// Says how featurise_clips turns clips into features.
struct clip_set_options {
  /// The set's root, for data set names and logs.
  std::filesystem::path root;
  /// Binary feature cache as in kws_options (empty: none), guarded by an flock on `<cache_file>.lock`.
  std::filesystem::path cache_file;
  /// Feature parameters.
  log_mel_options features;
  /// Samples per clip: shorter files are zero-padded at the end, longer ones truncated. @pre > 0
  int clip_samples = 16000;
  /// Number of classes. @pre > 0
  int num_classes = kws_num_classes;
  /// Whatever else the split depends on (the split rule and its files), mixed into the cache fingerprint.
  std::string split_key;
};

/// Decodes each clip (16-bit mono PCM at features.sample_rate), cuts or pads it to clip_samples and computes
/// its log-mel features, in the order given; or reads them all from the cache when its fingerprint (the
/// clips' paths, sizes, modification times, labels and splits, the options and `split_key`) matches. Returns
/// decode_failed naming the file for a bad WAV, io_error for an unreadable one, invalid_argument for bad options.
[[nodiscard]] expected<kws_data> featurise_clips(const std::vector<labelled_clip>& clips,
                                                 const clip_set_options& options);

/// Loads `<root>/<word>/*.wav` into log-mel features. The split comes from, in order: `<root>/manifest.csv`
/// (ops/make-kws-data; its `split` column, `path` relative to root), `<root>/testing_list.txt` (Google
/// Speech Commands: listed files are test, everything else incl. validation_list.txt is train), else a
/// hash of the speaker. Samples take the words in turn (the first clip of each word by path, in label order,
/// then the second of each, ...), so any contiguous run of samples holds every word. Returns not_found for a
/// missing root or a root without any keyword WAV, decode_failed naming the file for a bad WAV or manifest, io_error
/// for unreadable files. A cache that cannot be written is logged, not returned as an error. Callers sharing a cache
/// file (the processes of one job) featurise once: an exclusive flock on
/// `<cache_file>.lock` covers check, compute and write, so the others wait and then read the cache.
[[nodiscard]] expected<kws_data> load_kws(const kws_options& options);

}  // namespace prsgd::algorithms
