// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "prsgd/algorithms/dataset_registry.hpp"
#include "prsgd/common/expected.hpp"

/// The built-in data sets of `--dataset`, each a dataset_loader. Every error is one line naming the file
/// (or directory) and the problem.
namespace prsgd::algorithms {

/// Loads `fashion-mnist`: the gzip IDX files in `dir` (empty: fashion_mnist_default_dir()), normalised,
/// {1,28,28}, 10 classes. For dataset_parts::shape and test_and_train_size the training images are not
/// read: the train size comes from the label file alone. No options.
[[nodiscard]] expected<loaded_dataset> load_fashion_mnist_dataset(const dataset_request& request);

/// Loads `kws`: the keyword set made by ops/make-kws-data (`dir`, empty: data/kws) as log-mel features
/// {1,98,40}, 12 classes, with the feature cache `features.cache` in `dir` (see load_kws). For
/// dataset_parts::shape nothing is featurised and train_size is 0. No options.
[[nodiscard]] expected<loaded_dataset> load_kws_dataset(const dataset_request& request);

/// Loads `npy`: train_x.npy, train_y.npy, test_x.npy and test_y.npy in `dir` (see npy.hpp for the format).
/// Features are float32, float64 (converted to float32) or uint8 (divided by 255, so in [0, 1]); no other
/// normalisation. A features array of shape (N,) is {1,1,1}, (N,F) {1,1,F}, (N,H,W) {1,H,W} and (N,C,H,W)
/// {C,H,W}. Labels are (N,) or (N,1) of any integer type, >= 0. The class count is the largest label of
/// both splits + 1, or the option `classes=K` (then every label must be < K). NaN or infinite features are
/// refused. For dataset_parts::shape only the headers and the label files are read.
[[nodiscard]] expected<loaded_dataset> load_npy_dataset(const dataset_request& request);

/// Loads `csv`: train.csv and test.csv in `dir`, one sample per row: a label column and numeric feature
/// columns (shape {1,1,F}), comma-separated, optionally quoted. Options: `label-column` (0-based index,
/// `last`, or a header name; default 0), `header` (auto | yes | no; auto: the first row is a header when
/// one of its feature cells is not a number), `classes` (as for npy). Labels are integers >= 0; rows of a
/// different length, empty or non-numeric cells and NaN or infinite values are refused with file:line.
[[nodiscard]] expected<loaded_dataset> load_csv_dataset(const dataset_request& request);

/// Loads `wav-folder`: `dir`/train/<label>/*.wav and `dir`/test/<label>/*.wav, or, when `dir` has neither
/// train/ nor test/, `dir`/<label>/*.wav split by a hash of each file's path (option `test-percent`,
/// default 20). Labels are the label folder names in sorted (byte) order; test/ may not name a label
/// train/ lacks. Clips must be 16 kHz mono 16-bit PCM; each is cut or zero-padded to 1 s and turned into
/// {1,98,40} log-mel features like the keyword set, with the cache `features.cache` in `dir`.
[[nodiscard]] expected<loaded_dataset> load_wav_folder_dataset(const dataset_request& request);

/// Registers fashion-mnist, kws, npy, csv and wav-folder in `registry`. Names already taken are left alone.
void register_builtin_datasets(dataset_registry& registry);

}  // namespace prsgd::algorithms
