// SPDX-License-Identifier: Apache-2.0
// The `fashion-mnist` loader and the list of built-in data sets.
#include "prsgd/algorithms/datasets.hpp"
#include "prsgd/algorithms/fashion_mnist.hpp"

#include <cstdlib>
#include <string_view>

namespace prsgd::algorithms {

expected<loaded_dataset> load_fashion_mnist_dataset(const dataset_request& request) {
  PRSGD_TRY(check_dataset_options(request, "fashion-mnist", {}));
  const std::string dir = request.dir.empty() ? fashion_mnist_default_dir() : request.dir.string();
  const auto hint = [](error e) {
    e.context += " (Fashion-MNIST: install the Debian package dataset-fashion-mnist, or pass --data-dir)";
    return unexpected{std::move(e)};
  };
  // The images stay bytes in a cache file every process of the host maps (load_fashion_mnist_shared);
  // PRSGD_DATA_CACHE=off decodes them into this process's memory as floats instead (4 bytes a pixel).
  const char* cache = std::getenv("PRSGD_DATA_CACHE");
  const bool shared = cache == nullptr || std::string_view{cache} != "off";
  const auto load_split = [&](split which) -> expected<dataset> {
    if (!shared) {
      return load_fashion_mnist(dir, which);
    }
    auto loaded = load_fashion_mnist_shared(dir, which);
    PRSGD_TRY(loaded);
    return std::move(loaded->data);
  };
  loaded_dataset out;
  out.shape = {1, 28, 28};
  out.num_classes = 10;
  if (request.parts == dataset_parts::train) {
    auto train = load_split(split::train);
    if (!train) {
      return hint(train.error());
    }
    out.train_size = train->size();
    out.train = std::move(*train);
    return out;
  }
  // The averager (and a check before launching) needs the training split's size only: its label file, not
  // 47 MB of decompressed images.
  auto train_labels = fashion_mnist_labels(dir, split::train);
  if (!train_labels) {
    return hint(train_labels.error());
  }
  out.train_size = train_labels->size();
  if (request.parts == dataset_parts::test_and_train_size) {
    out.train_labels = std::move(*train_labels);
    auto test = load_split(split::test);
    if (!test) {
      return hint(test.error());
    }
    out.test = std::move(*test);
  }
  return out;
}

void register_builtin_datasets(dataset_registry& registry) {
  (void)registry.add("fashion-mnist", "Fashion-MNIST, 28x28 grey images, 10 classes (Debian: dataset-fashion-mnist)",
                     load_fashion_mnist_dataset);
  (void)registry.add("kws", "keyword spotting: 12 words as 98x40 log-mel features (ops/make-kws-data)",
                     load_kws_dataset);
  (void)registry.add("npy", "NumPy arrays: train_x.npy, train_y.npy, test_x.npy, test_y.npy", load_npy_dataset);
  (void)registry.add("csv", "CSV: train.csv and test.csv, a label column and numeric features", load_csv_dataset);
  (void)registry.add("wav-folder", "WAV clips in <label>/ folders, as 98x40 log-mel features", load_wav_folder_dataset);
}

}  // namespace prsgd::algorithms
