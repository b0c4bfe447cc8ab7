// SPDX-License-Identifier: Apache-2.0
// The trained model out: the averager's --save-model/--save-best (model_saver), and the `export`, `eval` and
// `predict` commands. Weights files are safetensors with PyTorch state_dict names (prsgd/algorithms/safetensors.hpp).
#include "model_commands.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "commands.hpp"
#include "prsgd/actors/checkpoint.hpp"
#include "prsgd/actors/checkpoint_store.hpp"
#include "prsgd/algorithms/kws_data.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/algorithms/safetensors.hpp"
#include "prsgd/cli/model_inputs.hpp"
#include "prsgd/common/json_quote.hpp"
#include "prsgd/common/log.hpp"

#ifndef PRSGD_VERSION_STRING
#define PRSGD_VERSION_STRING "unknown"
#endif

namespace prsgd::cli {

namespace {

std::string number(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : std::to_string(v);
}

std::string shape_text(const algorithms::shape3& s) {
  return std::to_string(s.channels) + "x" + std::to_string(s.height) + "x" + std::to_string(s.width);
}

// Parses "CxHxW".
std::optional<algorithms::shape3> parse_shape(const std::string& text) {
  algorithms::shape3 s;
  int* dims[] = {&s.channels, &s.height, &s.width};
  std::size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    const std::size_t end = i < 2 ? text.find('x', at) : text.size();
    if (end == std::string::npos) {
      return std::nullopt;
    }
    const auto [p, ec] = std::from_chars(text.data() + at, text.data() + end, *dims[i]);
    if (ec != std::errc{} || p != text.data() + end || *dims[i] <= 0) {
      return std::nullopt;
    }
    at = end + 1;
  }
  return s;
}

// The input shape and class count a data set's models take, when nothing else says.
std::optional<algorithms::model_config> default_config(const std::string& dataset) {
  if (dataset == "fashion-mnist") {
    return algorithms::model_config{{1, 28, 28}, 10, 1};
  }
  if (dataset == "kws") {
    return algorithms::model_config{{1, 98, 40}, algorithms::kws_num_classes, 1};
  }
  return std::nullopt;
}

std::vector<std::string> class_names(const std::string& dataset, int classes) {
  std::vector<std::string> names;
  if (dataset == "fashion-mnist" && classes == 10) {
    names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  } else if (dataset == "kws" && classes == algorithms::kws_num_classes) {
    for (const auto w : algorithms::kws_words()) {
      names.emplace_back(w);
    }
  } else {
    for (int i = 0; i < classes; ++i) {
      names.push_back(std::to_string(i));
    }
  }
  return names;
}

expected<std::unique_ptr<algorithms::model>> build(const std::string& name, const algorithms::model_config& config) {
  return algorithms::model_registry::instance().make(name, config);
}

// What every weights file prsgd writes says about itself.
std::map<std::string, std::string> base_metadata(const algorithms::model& m, const std::string& dataset,
                                                 const std::string& fingerprint) {
  std::map<std::string, std::string> md{{"format", "pt"},
                                        {"prsgd.model", m.name()},
                                        {"prsgd.version", PRSGD_VERSION_STRING},
                                        {"prsgd.input_shape", shape_text(m.input_shape())},
                                        {"prsgd.classes", std::to_string(m.num_classes())}};
  if (!dataset.empty()) {
    md["prsgd.dataset"] = dataset;
  }
  if (!fingerprint.empty()) {
    md["prsgd.fingerprint"] = fingerprint;
  }
  return md;
}

expected<void> write_weights(const std::string& path, const algorithms::model& layout, std::span<const float> params,
                             std::map<std::string, std::string> metadata) {
  // num_batches_tracked: prsgd does not count batches per layer; PyTorch reads it only with momentum=None.
  auto file = algorithms::export_tensors(layout, params, 0, std::move(metadata));
  if (!file) {
    return file.error();
  }
  return algorithms::write_safetensors(path, *file);
}

}  // namespace

// ---- the averager: --save-model / --save-best ------------------------------------------------------

std::string job_fingerprint(const algorithms::model& m, const std::string& dataset, std::size_t train_size,
                            std::uint64_t seed) {
  std::uint64_t h = 14695981039346656037ULL;
  const auto mix = [&](std::string_view bytes) {
    for (const unsigned char c : bytes) {
      h = (h ^ c) * 1099511628211ULL;
    }
    h = (h ^ 0xFFU) * 1099511628211ULL;  // field separator
  };
  mix(m.name());
  for (const auto& t : m.tensors()) {
    std::string dims = t.name;
    for (const auto d : t.shape) {
      dims += "," + std::to_string(d);
    }
    mix(dims);
  }
  mix(dataset);
  mix(std::to_string(train_size));
  mix(std::to_string(seed));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

model_saver::model_saver(save_options save, std::unique_ptr<algorithms::model> layout,
                         std::map<std::string, std::string> metadata)
    : save_(std::move(save)), layout_(std::move(layout)), metadata_(std::move(metadata)) {
  thread_ = std::thread([this] { run(); });
}

model_saver::~model_saver() {
  if (thread_.joinable()) {
    (void)finish();
  }
}

expected<std::unique_ptr<model_saver>> model_saver::make(const save_options& save, const std::string& model_name,
                                                         const algorithms::model_config& config,
                                                         std::map<std::string, std::string> metadata) {
  auto layout = build(model_name, config);
  if (!layout) {
    return layout.error();
  }
  return std::unique_ptr<model_saver>(new model_saver(save, std::move(*layout), std::move(metadata)));
}

std::unique_ptr<model_saver> model_saver::make_external(const save_options& save, external_model layout,
                                                        std::map<std::string, std::string> metadata) {
  auto saver = std::unique_ptr<model_saver>(new model_saver(save, nullptr, std::move(metadata)));
  saver->external_ = std::move(layout);
  saver->external_.initial.clear();
  return saver;
}

void model_saver::offer(const actors::model_snapshot& snapshot) {
  std::vector<job> jobs;
  if (snapshot.final) {
    final_seen_ = true;
    jobs.push_back({save_.save_model, "final", snapshot});
  } else if (save_.save_best && snapshot.test_acc && (!best_acc_ || *snapshot.test_acc > *best_acc_)) {
    best_acc_ = snapshot.test_acc;
    jobs.push_back({best_model_path(save_.save_model), "best", snapshot});
  }
  if (jobs.empty()) {
    return;
  }
  std::lock_guard lock(mu_);
  for (auto& j : jobs) {
    // A newer best supersedes a queued one: only the latest of a kind needs writing.
    std::erase_if(queue_, [&](const job& q) { return q.kind == j.kind; });
    queue_.push_back(std::move(j));
  }
  cv_.notify_all();
}

expected<void> model_saver::write(const job& j) const {
  auto md = metadata_;
  md["prsgd.kind"] = j.kind;
  md["prsgd.round"] = std::to_string(j.snapshot.rounds);
  if (j.snapshot.test_acc) {
    md["prsgd.test_accuracy"] = number(*j.snapshot.test_acc);
  }
  if (!layout_) {
    return write_external(j.path, external_, *j.snapshot.params, std::move(md));
  }
  return write_weights(j.path, *layout_, *j.snapshot.params, std::move(md));
}

void model_saver::run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      return;  // stopping, nothing left
    }
    job j = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    auto ok = write(j);
    if (ok) {
      PRSGD_LOG(info, "averager") << "saved the " << j.kind << " model (round " << j.snapshot.rounds << ") to "
                                  << j.path;
    } else {
      PRSGD_LOG(error, "averager") << "cannot save the " << j.kind << " model: " << ok.error().message();
    }
    lock.lock();
    if (!ok && !error_) {
      error_ = ok.error();
    }
  }
}

expected<void> model_saver::finish() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
  std::lock_guard lock(mu_);
  if (error_) {
    return *error_;
  }
  if (!final_seen_) {
    std::fprintf(stderr,
                 "prsgd averager: the job did not end here, so no final model was written to %s (export the "
                 "checkpoint with `prsgd export` instead)\n",
                 save_.save_model.c_str());
  } else {
    std::fprintf(stderr, "prsgd averager: model saved to %s%s\n", save_.save_model.c_str(),
                 save_.save_best && best_acc_ ? (" (best: " + best_model_path(save_.save_model) + ")").c_str() : "");
  }
  return {};
}

expected<std::unique_ptr<model_saver>> prepare_model_output(actors::averager_actor_config& cfg,
                                                            const save_options& save, const model_options& model,
                                                            const job_data& data) {
  auto probe = build(model.model, data.model);
  if (!probe) {
    return probe.error();
  }
  const std::string fingerprint = job_fingerprint(**probe, data.name, data.train_size, model.seed);
  cfg.core.model_identity = actors::checkpoint_model{model.model,
                                                     data.model.input.channels,
                                                     data.model.input.height,
                                                     data.model.input.width,
                                                     data.model.num_classes,
                                                     data.name,
                                                     fingerprint};
  if (save.save_model.empty()) {
    return std::unique_ptr<model_saver>{};
  }
  if (save.save_best && !data.test) {
    return fail(errc::invalid_argument, "--save-best needs a test set to compare models on");
  }
  auto saver = model_saver::make(save, model.model, data.model, base_metadata(**probe, data.name, fingerprint));
  if (!saver) {
    return saver.error();
  }
  cfg.on_model = [s = saver->get()](const actors::model_snapshot& snapshot) { s->offer(snapshot); };
  return saver;
}

std::unique_ptr<model_saver> prepare_external_output(actors::averager_actor_config& cfg, const save_options& save,
                                                     const external_model& model, std::uint64_t train_size,
                                                     std::uint64_t seed) {
  std::uint64_t h = 14695981039346656037ULL;
  for (const unsigned char c : external_model_fingerprint(model.size) + " " + external_data_fingerprint(train_size) +
                                   " seed=" + std::to_string(seed)) {
    h = (h ^ c) * 1099511628211ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  cfg.core.model_identity = actors::checkpoint_model{external_model_name, 0, 0, 0, 0, external_model_name, hex};
  if (save.save_model.empty()) {
    return nullptr;
  }
  std::map<std::string, std::string> md{{"format", "pt"},
                                        {"prsgd.model", external_model_name},
                                        {"prsgd.version", PRSGD_VERSION_STRING},
                                        {"prsgd.fingerprint", hex}};
  auto saver = model_saver::make_external(save, model, std::move(md));
  cfg.on_model = [s = saver.get()](const actors::model_snapshot& snapshot) { s->offer(snapshot); };
  return saver;
}

// ---- prsgd export ----------------------------------------------------------------------------------

int run_export(const export_options& o) {
  if (auto p = prepare_process(o.output); !p) {
    std::fprintf(stderr, "prsgd export: %s\n", p.error().message().c_str());
    return exit_usage;
  }
  auto store = actors::file_checkpoint_store::open(o.checkpoint_dir);
  if (!store) {
    std::fprintf(stderr, "prsgd export: %s\n", store.error().message().c_str());
    return exit_failure;
  }
  auto ckpt = store->read_newest();
  if (!ckpt) {
    std::fprintf(stderr, "prsgd export: no valid checkpoint in %s\n", o.checkpoint_dir.c_str());
    return exit_failure;
  }
  std::string name;
  algorithms::model_config config;
  std::string dataset;
  std::string fingerprint;
  if (ckpt->identity) {
    const auto& id = *ckpt->identity;
    if (!o.model.empty() && o.model != id.name) {
      std::fprintf(stderr, "prsgd export: the checkpoint is for model %s, not %s\n", id.name.c_str(), o.model.c_str());
      return exit_usage;
    }
    name = id.name;
    config = {{id.channels, id.height, id.width}, id.classes, 1};
    dataset = id.dataset;
    fingerprint = id.fingerprint;
  } else {
    if (o.model.empty()) {
      std::fprintf(stderr,
                   "prsgd export: the checkpoint in %s does not record its model (written by an older prsgd): "
                   "pass --model NAME\n",
                   o.checkpoint_dir.c_str());
      return exit_usage;
    }
    model_options m;
    m.model = o.model;
    m.dataset = o.dataset;
    dataset = resolve_dataset(m);
    auto d = default_config(dataset);
    if (!d) {
      std::fprintf(stderr, "prsgd export: no default input shape for data set %s\n", dataset.c_str());
      return exit_usage;
    }
    name = o.model;
    config = *d;
  }
  if (!algorithms::model_registry::instance().contains(name)) {
    std::fprintf(stderr, "prsgd export: unknown model '%s' (load its plugin with --plugin)\n", name.c_str());
    return exit_usage;
  }
  auto layout = build(name, config);
  if (!layout) {
    std::fprintf(stderr, "prsgd export: %s\n", layout.error().message().c_str());
    return exit_usage;
  }
  if (ckpt->model.size() != (*layout)->num_params()) {
    std::fprintf(stderr, "prsgd export: the checkpoint holds %zu values, model %s has %zu\n", ckpt->model.size(),
                 name.c_str(), (*layout)->num_params());
    return exit_usage;
  }
  auto md = base_metadata(**layout, dataset, fingerprint);
  md["prsgd.kind"] = "checkpoint";
  md["prsgd.round"] = std::to_string(ckpt->round);
  if (auto ok = write_weights(o.out, **layout, ckpt->model, std::move(md)); !ok) {
    std::fprintf(stderr, "prsgd export: %s\n", ok.error().message().c_str());
    return exit_failure;
  }
  std::fprintf(stderr, "prsgd export: wrote %s: model %s at round %llu, %zu tensors\n", o.out.c_str(), name.c_str(),
               static_cast<unsigned long long>(ckpt->round), (*layout)->tensors().size());
  return 0;
}

// ---- prsgd eval / predict ----------------------------------------------------------------------------

namespace {

// Reads the weights, settles the model name (--model or the file's) and the data set. Errors are usage errors.
expected<algorithms::st_file> read_weights(const std::string& path, model_options& m) {
  auto file = algorithms::read_safetensors(path);
  if (!file) {
    return file.error();
  }
  const auto recorded = file->metadata.find("prsgd.model");
  if (m.model.empty()) {
    if (recorded == file->metadata.end()) {
      return fail(errc::invalid_argument, path + " does not say which model it is for: pass --model NAME");
    }
    m.model = recorded->second;
  }
  if (!algorithms::model_registry::instance().contains(m.model)) {
    return fail(errc::invalid_argument, "unknown model '" + m.model + "' (load its plugin with --plugin)");
  }
  return file;
}

expected<std::unique_ptr<algorithms::model>> load_into(const algorithms::st_file& file, const std::string& name,
                                                       const algorithms::model_config& config,
                                                       const std::string& path) {
  auto net = build(name, config);
  if (!net) {
    return net.error();
  }
  auto params = algorithms::import_tensors(**net, file);
  if (!params) {
    const auto recorded = file.metadata.find("prsgd.model");
    const bool other = recorded != file.metadata.end() && recorded->second != name;
    return fail(errc::invalid_argument, path + ": " + params.error().context +
                                            (other ? " (the file is for model " + recorded->second + ")" : ""));
  }
  PRSGD_TRY((*net)->set_params(*params));
  return net;
}

// eval's and predict's start: plugins, then the weights file and the model name. Prints why it fails.
std::optional<algorithms::st_file> open_weights(const char* command, const output_options& out,
                                                const std::string& weights, model_options& m) {
  if (auto p = prepare_process(out); !p) {
    std::fprintf(stderr, "prsgd %s: %s\n", command, p.error().message().c_str());
    return std::nullopt;
  }
  auto file = read_weights(weights, m);
  if (!file) {
    std::fprintf(stderr, "prsgd %s: %s\n", command, file.error().context.c_str());
    return std::nullopt;
  }
  return std::move(*file);
}

}  // namespace

int run_eval(const eval_options& o) {
  model_options m = o.model;
  auto file = open_weights("eval", o.output, o.weights, m);
  if (!file) {
    return exit_usage;
  }
  auto data = load_job_data(m, data_need::train_size_and_test);
  if (!data) {
    std::fprintf(stderr, "prsgd eval: %s\n", data.error().message().c_str());
    return exit_failure;
  }
  auto net = load_into(*file, m.model, data->model, o.weights);
  if (!net) {
    std::fprintf(stderr, "prsgd eval: %s\n", net.error().context.c_str());
    return exit_usage;
  }
  const algorithms::dataset& test = *data->test;
  const int classes = (*net)->num_classes();
  std::vector<std::vector<std::size_t>> confusion(static_cast<std::size_t>(classes),
                                                  std::vector<std::size_t>(static_cast<std::size_t>(classes), 0));
  std::vector<std::int32_t> predicted(test.size());
  double loss_sum = 0;
  constexpr std::size_t batch = 256;
  std::vector<float> inputs;  // the batch as floats, from either storage (a shared byte cache or floats)
  for (std::size_t start = 0; start < test.size(); start += batch) {
    const std::size_t n = std::min(batch, test.size() - start);
    inputs.resize(n * test.sample_size());
    for (std::size_t i = 0; i < n; ++i) {
      test.copy_sample(start + i, inputs.data() + i * test.sample_size());
    }
    const algorithms::tensor& logits = (*net)->predict(std::span<const float>(inputs), n);
    const std::span<const std::int32_t> labels(test.labels.data() + start, n);
    loss_sum +=
        static_cast<double>(algorithms::softmax_cross_entropy(logits, labels, nullptr)) * static_cast<double>(n);
    for (std::size_t i = 0; i < n; ++i) {
      Eigen::Index best = 0;
      logits.col(static_cast<Eigen::Index>(i)).maxCoeff(&best);
      predicted[start + i] = static_cast<std::int32_t>(best);
      ++confusion[static_cast<std::size_t>(labels[i])][static_cast<std::size_t>(best)];
    }
  }
  std::size_t correct = 0;
  for (int c = 0; c < classes; ++c) {
    correct += confusion[static_cast<std::size_t>(c)][static_cast<std::size_t>(c)];
  }
  const double accuracy = test.size() > 0 ? static_cast<double>(correct) / static_cast<double>(test.size()) : 0.0;
  const double loss = test.size() > 0 ? loss_sum / static_cast<double>(test.size()) : 0.0;
  if (!o.predictions.empty()) {
    std::ofstream out(o.predictions);
    out << "index,label,predicted\n";
    for (std::size_t i = 0; i < test.size(); ++i) {
      out << i << ',' << test.labels[i] << ',' << predicted[i] << '\n';
    }
    if (!out.flush()) {
      std::fprintf(stderr, "prsgd eval: cannot write %s\n", o.predictions.c_str());
      return exit_failure;
    }
  }
  const auto names = class_names(data->name, classes);
  const auto row_total = [&](int c) {
    const auto& row = confusion[static_cast<std::size_t>(c)];
    return std::accumulate(row.begin(), row.end(), std::size_t{0});
  };
  const auto class_acc = [&](int c) {
    const auto n = row_total(c);
    return n > 0 ? static_cast<double>(confusion[static_cast<std::size_t>(c)][static_cast<std::size_t>(c)]) /
                       static_cast<double>(n)
                 : 0.0;
  };
  std::ostringstream s;
  if (o.json) {
    s << "{\"model\":" << json_quote(m.model) << ",\"weights\":" << json_quote(o.weights)
      << ",\"dataset\":" << json_quote(data->name) << ",\"samples\":" << test.size()
      << ",\"accuracy\":" << number(accuracy) << ",\"loss\":" << number(loss) << ",\"per_class\":[";
    for (int c = 0; c < classes; ++c) {
      s << (c > 0 ? "," : "") << "{\"class\":" << c << ",\"name\":" << json_quote(names[static_cast<std::size_t>(c)])
        << ",\"samples\":" << row_total(c) << ",\"accuracy\":" << number(class_acc(c)) << "}";
    }
    s << "],\"confusion\":[";
    for (int c = 0; c < classes; ++c) {
      s << (c > 0 ? "," : "") << "[";
      for (int k = 0; k < classes; ++k) {
        s << (k > 0 ? "," : "") << confusion[static_cast<std::size_t>(c)][static_cast<std::size_t>(k)];
      }
      s << "]";
    }
    s << "]}\n";
  } else {
    char line[256];
    std::snprintf(line, sizeof line, "%s on %s test (%zu samples): accuracy %.2f %%, loss %.4f\n\n", m.model.c_str(),
                  data->name.c_str(), test.size(), 100.0 * accuracy, loss);
    s << line << "  class                 samples  accuracy\n";
    for (int c = 0; c < classes; ++c) {
      std::snprintf(line, sizeof line, "  %2d %-18s %8zu  %7.2f %%\n", c, names[static_cast<std::size_t>(c)].c_str(),
                    row_total(c), 100.0 * class_acc(c));
      s << line;
    }
    s << "\nconfusion matrix (rows: true class, columns: predicted)\n     ";
    for (int k = 0; k < classes; ++k) {
      std::snprintf(line, sizeof line, "%6d", k);
      s << line;
    }
    s << "\n";
    for (int c = 0; c < classes; ++c) {
      std::snprintf(line, sizeof line, "  %2d ", c);
      s << line;
      for (int k = 0; k < classes; ++k) {
        std::snprintf(line, sizeof line, "%6zu", confusion[static_cast<std::size_t>(c)][static_cast<std::size_t>(k)]);
        s << line;
      }
      s << "\n";
    }
  }
  std::fputs(s.str().c_str(), stdout);
  return 0;
}

int run_predict(const predict_options& o) {
  model_options m = o.model;
  auto file = open_weights("predict", o.output, o.weights, m);
  if (!file) {
    return exit_usage;
  }
  const std::string dataset = resolve_dataset(m);
  // The input shape and classes: what the weights file records, else the data set's usual ones.
  std::optional<algorithms::model_config> config;
  const auto shape = file->metadata.find("prsgd.input_shape");
  const auto classes = file->metadata.find("prsgd.classes");
  if (shape != file->metadata.end() && classes != file->metadata.end()) {
    const auto s = parse_shape(shape->second);
    int k = 0;
    const auto [p, ec] = std::from_chars(classes->second.data(), classes->second.data() + classes->second.size(), k);
    if (s && ec == std::errc{} && k > 0) {
      config = algorithms::model_config{*s, k, 1};
    }
  }
  if (!config) {
    config = default_config(dataset);
  }
  if (!config) {
    std::fprintf(stderr, "prsgd predict: %s does not record the model's input shape, and data set %s has no default\n",
                 o.weights.c_str(), dataset.c_str());
    return exit_usage;
  }
  auto net = load_into(*file, m.model, *config, o.weights);
  if (!net) {
    std::fprintf(stderr, "prsgd predict: %s\n", net.error().context.c_str());
    return exit_usage;
  }
  const auto names = class_names(dataset, (*net)->num_classes());
  const auto k = static_cast<std::size_t>(std::min(o.top_k, (*net)->num_classes()));
  const algorithms::shape3 in = (*net)->input_shape();
  for (const auto& path : o.inputs) {
    auto samples = read_model_input(path, in, dataset);
    if (!samples) {
      std::fprintf(stderr, "prsgd predict: %s\n", samples.error().context.c_str());
      return samples.error().code == errc::io_error ? exit_failure : exit_usage;
    }
    for (std::size_t i = 0; i < samples->count; ++i) {
      const algorithms::tensor& logits =
          (*net)->predict(std::span<const float>(samples->values.data() + i * in.size(), in.size()), 1);
      // Softmax in double, stable: exp(x - max) / sum.
      std::vector<double> prob(static_cast<std::size_t>(logits.rows()));
      const double top = logits.col(0).maxCoeff();
      double sum = 0;
      for (std::size_t c = 0; c < prob.size(); ++c) {
        prob[c] = std::exp(static_cast<double>(logits(static_cast<Eigen::Index>(c), 0)) - top);
        sum += prob[c];
      }
      std::vector<std::size_t> order(prob.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return prob[a] > prob[b]; });
      const std::string where = samples->count > 1 ? path + "#" + std::to_string(i) : path;
      std::ostringstream s;
      if (o.json) {
        s << "{\"input\":" << json_quote(path) << ",\"index\":" << i << ",\"top\":[";
        for (std::size_t r = 0; r < k; ++r) {
          s << (r > 0 ? "," : "") << "{\"class\":" << order[r] << ",\"name\":" << json_quote(names[order[r]])
            << ",\"probability\":" << number(prob[order[r]] / sum) << "}";
        }
        s << "]}\n";
      } else {
        s << where << ":";
        for (std::size_t r = 0; r < k; ++r) {
          char item[128];
          std::snprintf(item, sizeof item, "%s %s %.4f", r > 0 ? "," : "", names[order[r]].c_str(),
                        prob[order[r]] / sum);
          s << item;
        }
        s << "\n";
      }
      std::fputs(s.str().c_str(), stdout);
    }
  }
  return 0;
}

}  // namespace prsgd::cli
