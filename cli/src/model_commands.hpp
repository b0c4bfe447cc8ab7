// SPDX-License-Identifier: Apache-2.0
// The averager's side of --save-model / --save-best, and the model identity it records in checkpoints.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "external_model.hpp"
#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/algorithms/model.hpp"
#include "prsgd/cli/job_data.hpp"
#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"

namespace prsgd::cli {

/// Writes the averager's x̄ as safetensors: the final one to --save-model FILE, and with --save-best the
/// best by test accuracy (ties keep the earlier) to best_model_path(FILE), rewritten when it improves.
/// Thread contract: `offer` is called on the averager actor's strand and only queues (it copies the shared
/// pointer); a thread of its own writes the files, so the strand never waits for the disk. `finish` is
/// called once by the owner after the actor system has stopped.
class model_saver {
 public:
  /// Builds the export layout of `model_name` for `config`. Returns the registry's error.
  [[nodiscard]] static expected<std::unique_ptr<model_saver>> make(const save_options& save,
                                                                   const std::string& model_name,
                                                                   const algorithms::model_config& config,
                                                                   std::map<std::string, std::string> metadata);
  /// Writes an external model's x̄ (write_external: the spec's tensors, or one flat tensor).
  [[nodiscard]] static std::unique_ptr<model_saver> make_external(const save_options& save, external_model layout,
                                                                  std::map<std::string, std::string> metadata);
  model_saver(const model_saver&) = delete;
  model_saver& operator=(const model_saver&) = delete;
  ~model_saver();

  /// Queues what `snapshot` asks for: the best file when its accuracy beats the best so far, the final file.
  void offer(const actors::model_snapshot& snapshot);
  /// Writes what is queued, stops the thread and returns the first write error. Reports on stderr what was
  /// written, and that no final model was written if the job did not end (suspended to a checkpoint).
  [[nodiscard]] expected<void> finish();

 private:
  struct job {
    std::string path;
    std::string kind;  // "final" | "best"
    actors::model_snapshot snapshot;
  };
  model_saver(save_options save, std::unique_ptr<algorithms::model> layout,
              std::map<std::string, std::string> metadata);
  void run();
  expected<void> write(const job& j) const;

  save_options save_;
  std::unique_ptr<algorithms::model> layout_;  // null for an external model
  external_model external_;
  std::map<std::string, std::string> metadata_;
  std::optional<double> best_acc_;  // on the strand only
  bool final_seen_ = false;         // on the strand only; read by finish() after the strand stopped
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<job> queue_;       // guarded by mu_
  bool stopping_ = false;       // guarded by mu_
  std::optional<error> error_;  // guarded by mu_
  std::thread thread_;
};

/// Returns the job fingerprint: 16 hex digits of a 64-bit FNV-1a hash over the model name, its tensor
/// names and shapes, the data set name and training-set size, and the seed.
[[nodiscard]] std::string job_fingerprint(const algorithms::model& m, const std::string& dataset,
                                          std::size_t train_size, std::uint64_t seed);

/// Prepares the same for `--model external`: the identity names the model "external" and fingerprints its
/// size, the training-set size and the seed; --save-model writes write_external's file.
[[nodiscard]] std::unique_ptr<model_saver> prepare_external_output(actors::averager_actor_config& cfg,
                                                                   const save_options& save,
                                                                   const external_model& model,
                                                                   std::uint64_t train_size, std::uint64_t seed);

/// Prepares what the averager records about its model: the identity its checkpoints carry (set in
/// `cfg.core.model_identity`) and, with --save-model, a saver hooked to `cfg.on_model` (null without).
/// Returns invalid_argument for --save-best without a test set, or the registry's error.
[[nodiscard]] expected<std::unique_ptr<model_saver>> prepare_model_output(actors::averager_actor_config& cfg,
                                                                          const save_options& save,
                                                                          const model_options& model,
                                                                          const job_data& data);

}  // namespace prsgd::cli
