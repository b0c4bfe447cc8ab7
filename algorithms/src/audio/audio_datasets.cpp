// SPDX-License-Identifier: Apache-2.0
// The audio data sets of the registry: `kws` (the keyword set) and `wav-folder` (any labelled clips).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <system_error>
#include <vector>

#include "../data/dataset_files.hpp"
#include "prsgd/algorithms/datasets.hpp"
#include "prsgd/algorithms/kws_data.hpp"
#include "prsgd/common/log.hpp"

namespace prsgd::algorithms {
namespace fs = std::filesystem;

namespace {

/// Returns the sample shape of a clip set: {1, frames, mels}.
expected<std::array<int, 3>> clip_shape(const log_mel_options& features, int clip_samples) {
  auto mel = log_mel::make(features);
  PRSGD_TRY(mel);
  return std::array<int, 3>{1, mel->num_frames(static_cast<std::size_t>(clip_samples)), features.num_mels};
}

loaded_dataset from_splits(kws_data&& data, dataset_parts parts) {
  loaded_dataset out;
  out.shape = data.train.shape;
  out.num_classes = data.train.num_classes;
  out.train_size = data.train.size();
  if (parts == dataset_parts::train) {
    out.train = std::move(data.train);
  } else if (parts == dataset_parts::test_and_train_size) {
    out.train_labels = std::move(data.train.labels);
    out.test = std::move(data.test);
  }
  return out;
}

bool is_wav(const fs::directory_entry& e) {
  std::error_code ec;
  std::string ext = e.path().extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".wav" && e.is_regular_file(ec);
}

/// Returns the names of the visible subdirectories of `dir`, sorted.
expected<std::vector<std::string>> label_folders(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] != '.' && it->is_directory(ec)) {
      out.push_back(name);
    }
  }
  if (ec) {
    return fail(errc::io_error, dir.string() + ": cannot list: " + ec.message());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Appends `root`/<label>/*.wav for every label to `clips` (rel = `prefix` + label/file).
expected<void> scan_labels(const fs::path& root, const std::string& prefix, const std::vector<std::string>& labels,
                           bool test, std::vector<labelled_clip>& clips) {
  for (std::size_t l = 0; l < labels.size(); ++l) {
    const fs::path dir = root / labels[l];
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      continue;
    }
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (is_wav(*it)) {
        clips.push_back(
            {prefix + labels[l] + "/" + it->path().filename().string(), it->path(), static_cast<int>(l), test});
      }
    }
    if (ec) {
      return fail(errc::io_error, dir.string() + ": cannot list: " + ec.message());
    }
  }
  return {};
}

}  // namespace

expected<loaded_dataset> load_kws_dataset(const dataset_request& request) {
  PRSGD_TRY(check_dataset_options(request, "kws", {}));
  kws_options k;
  k.root = request.dir.empty() ? fs::path{"data/kws"} : request.dir;
  k.cache_file = k.root / "features.cache";
  const std::string hint =
      " (make the keyword set with ops/make-kws-data --out " + k.root.string() + ", or pass --data-dir)";
  if (request.parts == dataset_parts::shape) {
    std::error_code ec;
    if (!fs::is_directory(k.root, ec)) {
      return fail(errc::not_found, k.root.string() + ": no such data-set directory" + hint);
    }
    loaded_dataset out;
    auto shape = clip_shape(k.features, k.clip_samples);
    PRSGD_TRY(shape);
    out.shape = *shape;
    out.num_classes = kws_num_classes;
    return out;
  }
  auto data = load_kws(k);
  if (!data) {
    auto e = data.error();
    e.context += hint;
    return unexpected{e};
  }
  PRSGD_LOG(info, "data") << "keyword set " << k.root.string() << ": " << data->train.size() << " train, "
                          << data->test.size() << " test clips" << (data->from_cache ? " (cached features)" : "");
  return from_splits(std::move(*data), request.parts);
}

expected<loaded_dataset> load_wav_folder_dataset(const dataset_request& request) {
  PRSGD_TRY(check_dataset_options(request, "wav-folder", {"test-percent"}));
  const fs::path& root = request.dir;
  if (root.empty()) {
    return fail(errc::invalid_argument,
                "the wav-folder data set needs --data-dir (a directory with "
                "train/<label>/*.wav and test/<label>/*.wav, or <label>/*.wav)");
  }
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return fail(errc::not_found, root.string() + ": no such data-set directory");
  }
  const bool has_train = fs::is_directory(root / "train", ec);
  const bool has_test = fs::is_directory(root / "test", ec);
  const auto percent_option = request.options.find("test-percent");
  if (has_train != has_test) {
    return fail(errc::invalid_argument, root.string() + ": has " +
                                            (has_train ? "train/ but no test/" : "test/ but no train/") +
                                            " (give both, or neither and let test-percent split <label>/*.wav)");
  }
  clip_set_options c;
  c.root = root;
  c.cache_file = root / "features.cache";
  std::vector<labelled_clip> clips;
  std::vector<std::string> labels;
  if (has_train) {
    if (percent_option != request.options.end()) {
      return fail(errc::invalid_argument, root.string() +
                                              ": has train/ and test/, so --data-option test-percent "
                                              "does not apply");
    }
    auto train_labels = label_folders(root / "train");
    PRSGD_TRY(train_labels);
    auto test_labels = label_folders(root / "test");
    PRSGD_TRY(test_labels);
    for (const auto& l : *test_labels) {
      if (!std::binary_search(train_labels->begin(), train_labels->end(), l)) {
        return fail(errc::decode_failed,
                    (root / "test" / l).string() + ": label '" + l + "' has no folder in " + (root / "train").string());
      }
    }
    labels = std::move(*train_labels);
    PRSGD_TRY(scan_labels(root / "train", "train/", labels, false, clips));
    PRSGD_TRY(scan_labels(root / "test", "test/", labels, true, clips));
    c.split_key = "wav-folder train/test";
  } else {
    int percent = 20;
    if (percent_option != request.options.end()) {
      const std::string& t = percent_option->second;
      const auto [end, err] = std::from_chars(t.data(), t.data() + t.size(), percent);
      if (err != std::errc{} || end != t.data() + t.size() || percent < 1 || percent > 99) {
        return fail(errc::invalid_argument, "--data-option test-percent must be an integer in 1..99 (got '" + t + "')");
      }
    }
    auto found = label_folders(root);
    PRSGD_TRY(found);
    labels = std::move(*found);
    PRSGD_TRY(scan_labels(root, "", labels, false, clips));
    for (labelled_clip& clip : clips) {
      fnv1a h;
      h.add(clip.rel);
      clip.test = static_cast<int>(h.value() % 100) < percent;
    }
    c.split_key = "wav-folder hash " + std::to_string(percent);
  }
  if (labels.empty()) {
    return fail(errc::not_found, root.string() + ": no label folders (expected " +
                                     (has_train ? "train/<label>/*.wav" : "<label>/*.wav") + ")");
  }
  std::vector<int> train_per_label(labels.size(), 0);
  std::size_t train_size = 0;
  for (const labelled_clip& clip : clips) {
    if (!clip.test) {
      ++train_per_label[static_cast<std::size_t>(clip.label)];
      ++train_size;
    }
  }
  for (std::size_t l = 0; l < labels.size(); ++l) {
    if (train_per_label[l] == 0) {
      return fail(errc::decode_failed, (has_train ? root / "train" / labels[l] : root / labels[l]).string() +
                                           ": no training clips (*.wav) for label '" + labels[l] + "'");
    }
  }
  if (train_size == clips.size()) {
    return fail(errc::decode_failed, root.string() + ": no test clips" +
                                         (has_train ? std::string{" in test/<label>/*.wav"}
                                                    : std::string{"; raise --data-option test-percent"}));
  }
  std::sort(clips.begin(), clips.end(), [](const labelled_clip& a, const labelled_clip& b) {
    return a.label != b.label ? a.label < b.label : a.rel < b.rel;
  });
  c.num_classes = static_cast<int>(labels.size());
  if (request.parts == dataset_parts::shape) {
    loaded_dataset out;
    auto shape = clip_shape(c.features, c.clip_samples);
    PRSGD_TRY(shape);
    out.shape = *shape;
    out.num_classes = c.num_classes;
    out.train_size = train_size;
    return out;
  }
  auto data = featurise_clips(clips, c);
  PRSGD_TRY(data);
  PRSGD_LOG(info, "data") << "wav-folder " << root.string() << ": " << labels.size() << " labels, "
                          << data->train.size() << " train, " << data->test.size() << " test clips"
                          << (data->from_cache ? " (cached features)" : "");
  return from_splits(std::move(*data), request.parts);
}

}  // namespace prsgd::algorithms
