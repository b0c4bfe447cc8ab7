// SPDX-License-Identifier: Apache-2.0
#include "prsgd/cli/options.hpp"

#include <CLI/CLI.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <variant>

#include "prsgd/actors/averager_core.hpp"
#include "prsgd/actors/protocol.hpp"
#include "prsgd/algorithms/aggregation.hpp"
#include "prsgd/algorithms/averaging.hpp"
#include "prsgd/algorithms/outer_optimizer.hpp"
#include "prsgd/algorithms/schedule.hpp"
#include "prsgd/common/log.hpp"

#ifndef PRSGD_VERSION_STRING
#define PRSGD_VERSION_STRING "unknown"
#endif

namespace prsgd::cli {
namespace {

// CLI11 messages are nearly always one line; make sure of it.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') {
    text.pop_back();
  }
  return text;
}

template <class T>
std::string str(const T& v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

prsgd::unexpected bad(const std::string& what) { return fail(errc::invalid_argument, what); }

// Vector options collect every occurrence (flags and file are not merged: see apply_config).
template <class T>
CLI::Option* add_list(CLI::App& app, const std::string& name, std::vector<T>& target, const std::string& help) {
  return app.add_option(name, target, help)->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void add_output(CLI::App& app, output_options& o) {
  app.add_option("--config", o.config_file,
                 "YAML file with any of these options (keys = long names without --); flags override it")
      ->type_name("FILE")
      ->group("Common");
  app.add_option("--log-level", o.log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str()
      ->group("Common");
  app.add_option("--plugin", o.plugins, "Shared library to load at start (repeatable); see docs/cli.md")
      ->type_name("PATH")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group("Common");
  app.add_option("--metrics-jsonl", o.metrics_jsonl, "Append one JSON object per round to FILE")
      ->type_name("FILE")
      ->group("Common");
  app.add_option("--metrics-port", o.metrics_port, "Serve metrics on 127.0.0.1:PORT (0 = off)")
      ->capture_default_str()
      ->group("Common");
  app.add_option("--progress", o.progress, "auto (updating line on a terminal) | plain | off")
      ->capture_default_str()
      ->group("Common");
}

// ---- option tables ---------------------------------------------------------------------------------
// Each group of options that more than one role takes is one table: the table registers the options with
// CLI11 (and so with the YAML config) and turns a parsed group back into arguments (`prsgd local` passes its
// groups to the averager and workers it starts). A new option of a group is one line here.

using field_ref =
    std::variant<int*, double*, std::uint64_t*, std::string*, bool*, std::vector<int>*, std::vector<std::string>*>;

struct option_def {
  std::string name;  // with the leading dashes
  std::string help;
  field_ref field;
  bool path = false;  // a file or directory: passed on as an absolute path
};

std::vector<option_def> liveness_table(liveness_options& o) {
  return {
      {"--heartbeat-ms", "Heartbeat interval in ms", &o.heartbeat_ms},
      {"--heartbeat-timeout-ms", "Declare a silent peer dead after this many ms", &o.heartbeat_timeout_ms},
  };
}

std::vector<option_def> model_table(model_options& o) {
  return {
      {"--model", "Registered model name (fmnist-mlp, fmnist-cnn, kws-cnn, ...) or a spec: mlp:IN-H-...-OUT, cnn:...",
       &o.model},
      {"--dataset",
       "auto (kws for kws-* models, else fashion-mnist) | fashion-mnist | kws | npy | csv | wav-folder | a plugin's",
       &o.dataset},
      {"--data-dir", "Data set directory (default: the data set's standard location)", &o.data_dir, true},
      {"--data-option", "KEY=VALUE setting of the data set (repeatable), e.g. label-column=last for csv",
       &o.data_options},
      {"--batch", "Mini-batch size per worker step", &o.batch},
      {"--lr", "SGD step size (> 0)", &o.lr},
      {"--momentum", "SGD momentum in [0, 1)", &o.momentum},
      {"--momentum-on-restart", "keep | reset the momentum buffer at a restart", &o.momentum_on_restart},
      {"--seed", "Seed for initialisation, shuffling and sharding", &o.seed},
      {"--non-iid", "Shard the training set with Dirichlet label skew", &o.non_iid},
      {"--dirichlet-alpha", "Label-skew concentration for --non-iid (> 0)", &o.dirichlet_alpha},
  };
}

std::vector<option_def> schedule_table(schedule_options& o) {
  return {
      {"--mode", "restarted (PR-SGD) | minibatch (gradient averaged every step)", &o.mode},
      {"--epochs", "Passes over the training set (0 = use --rounds)", &o.epochs},
      {"--rounds", "Stop after this many rounds (0 = from --epochs)", &o.rounds},
      {"--interval", "Local steps between averaging rounds, I", &o.interval},
      {"--intervals", "Per-worker I_i by worker id, e.g. 4,8,16 (--interval-policy per-worker)", &o.intervals},
      {"--interval-policy", "fixed | per-worker | paper | time-balanced", &o.interval_policy},
      {"--deadline", "none | fixed | adaptive (median + k*MAD of past arrivals)", &o.deadline},
      {"--deadline-ms", "Fixed deadline after a round starts, in ms (--deadline fixed)", &o.deadline_ms},
      {"--deadline-mad-k", "k in median + k*MAD (--deadline adaptive)", &o.deadline_mad_k},
      {"--quorum", "Submissions a deadline needs before it may close the barrier", &o.quorum},
      {"--step-size", "constant (--lr) | paper (gamma = --lr * sqrt(N/T))", &o.step_size},
      {"--warmup-rounds", "Linear warm-up of the step size over R rounds", &o.warmup_rounds},
      {"--outer", "Outer optimiser on the averaged delta: none | sgd | momentum | nesterov", &o.outer},
      {"--outer-lr", "Outer learning rate (> 0)", &o.outer_lr},
      {"--outer-momentum", "Outer momentum in [0, 1)", &o.outer_momentum},
      {"--averaging", "auto | uniform | samples | step-normalised", &o.averaging},
      {"--aggregate", "How the weighted updates combine: mean | trimmed-mean | median | norm-clip", &o.aggregate},
      {"--trim", "Weight mass trimmed-mean removes from each end of every coordinate, in [0, 0.5)", &o.trim},
      {"--clip", "Update norm bound of norm-clip (0 = the round's median update norm)", &o.clip},
      {"--screen-k", "Leave out updates with norm > k x the round's median update norm (0 = off; else >= 1)",
       &o.screen_k},
      {"--eval-every", "Evaluate x̄ on the test set every K rounds (0 = at every epoch end and at the end)",
       &o.eval_every},
      {"--checkpoint-every", "Checkpoint every K rounds (0 = never)", &o.checkpoint_every},
      {"--checkpoint-dir", "Checkpoint directory; the same job's newest checkpoint there is resumed", &o.checkpoint_dir,
       true},
      {"--resume", "Resume the checkpoint in --checkpoint-dir even if it is of another job (same model)", &o.resume},
      {"--fresh", "Start a new job in --checkpoint-dir; its old checkpoints move to replaced-N/", &o.fresh},
      {"--min-workers", "Workers that must join before round 0; N in the epoch length (0 = 1; local: --workers)",
       &o.min_workers},
      {"--max-workers", "Data shards: at most this many members train at once, more wait (0 = --min-workers)",
       &o.max_workers},
      {"--idle-rounds", "Remove a member that has not submitted for this many rounds (0 = never)", &o.idle_rounds},
  };
}

void add_table(CLI::App& app, const std::vector<option_def>& table, const std::string& group) {
  for (const auto& def : table) {
    CLI::Option* opt = std::visit(
        [&](auto* field) -> CLI::Option* {
          using T = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_same_v<T, bool>) {
            return app.add_flag(def.name, *field, def.help);
          } else if constexpr (std::is_same_v<T, std::vector<int>>) {
            return add_list(app, def.name, *field, def.help);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            return app.add_option(def.name, *field, def.help)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
          } else {
            return app.add_option(def.name, *field, def.help)->capture_default_str();
          }
        },
        def.field);
    opt->group(group);
  }
}

// Shortest text that reads back as the same double (0.05 -> "0.05").
std::string number_text(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : str(v);
}

std::vector<std::string> table_arguments(const std::vector<option_def>& table) {
  std::vector<std::string> out;
  for (const auto& def : table) {
    std::visit(
        [&](auto* field) {
          using T = std::remove_pointer_t<decltype(field)>;
          if constexpr (std::is_same_v<T, bool>) {
            if (*field) {
              out.push_back(def.name);
            }
          } else if constexpr (std::is_same_v<T, std::vector<int>>) {
            if (!field->empty()) {
              std::string list;
              for (int x : *field) {
                list += (list.empty() ? "" : ",") + std::to_string(x);
              }
              out.push_back(def.name);
              out.push_back(list);
            }
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            for (const auto& value : *field) {
              out.push_back(def.name);
              out.push_back(value);
            }
          } else if constexpr (std::is_same_v<T, std::string>) {
            if (!field->empty()) {
              out.push_back(def.name);
              out.push_back(def.path ? std::filesystem::absolute(*field).string() : *field);
            }
          } else if constexpr (std::is_same_v<T, double>) {
            out.push_back(def.name);
            out.push_back(number_text(*field));
          } else {
            out.push_back(def.name);
            out.push_back(std::to_string(*field));
          }
        },
        def.field);
  }
  return out;
}

void add_liveness(CLI::App& app, liveness_options& o) { add_table(app, liveness_table(o), "Failure detection"); }

void add_security(CLI::App& app, security_options& o) {
  app.add_option("--curve-public-key", o.curve_public_key, "This process's CURVE public key file (prsgd keygen)")
      ->group("Security");
  app.add_option("--curve-secret-key", o.curve_secret_key, "This process's CURVE secret key file")
      ->group("Security");
  app.add_option("--curve-allow", o.curve_allow,
                 "Client public key file, or a directory of .public files, allowed to connect (repeatable; "
                 "servers only; default: any client)")
      ->group("Security");
  app.add_option("--curve-server-key", o.curve_server_key, "The server's CURVE public key file (clients only)")
      ->group("Security");
  app.add_flag("--insecure", o.insecure,
               "Allow a non-loopback tcp address without CURVE keys (anyone who reaches the port can join)")
      ->group("Security");
}

void add_model(CLI::App& app, model_options& o) { add_table(app, model_table(o), "Model and data"); }

void add_schedule(CLI::App& app, schedule_options& o) { add_table(app, schedule_table(o), "Rounds"); }

// ---- the trained model out: --save-model, export, eval, predict ----------------------------------

std::vector<option_def> save_table(save_options& o) {
  return {
      {"--save-model", "Write the final model to FILE (safetensors, PyTorch names)", &o.save_model, true},
      {"--save-best", "Also keep the model with the best test accuracy in FILE with .best before the extension",
       &o.save_best},
  };
}

void add_save(CLI::App& app, save_options& o) { add_table(app, save_table(o), "Model output"); }

// --config, --log-level and --plugin: the output options that apply to the model tools.
void add_tool_output(CLI::App& app, output_options& o) {
  app.add_option("--config", o.config_file, "YAML file with any of these options; flags override it")
      ->type_name("FILE")
      ->group("Common");
  app.add_option("--log-level", o.log_level, "trace|debug|info|warn|error|off")->capture_default_str()->group("Common");
  app.add_option("--plugin", o.plugins, "Shared library to load at start (repeatable), e.g. for its models")
      ->type_name("PATH")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group("Common");
}

// --model (default: the weights file's), --dataset, --data-dir.
void add_tool_model(CLI::App& app, model_options& o) {
  o.model.clear();
  app.add_option("--model", o.model, "Registered model name (default: the one recorded in the weights file)")
      ->group("Model and data");
  app.add_option("--dataset", o.dataset,
                 "auto (kws for kws-* models, else fashion-mnist) | fashion-mnist | kws | npy | csv | wav-folder | "
                 "a plugin's")
      ->capture_default_str()
      ->group("Model and data");
  app.add_option("--data-dir", o.data_dir, "Data set directory (default: the data set's standard location)")
      ->group("Model and data");
}

constexpr const char* endpoint_file_help =
    "Once bound, write the bound endpoint to FILE (e.g. with --listen tcp://127.0.0.1:*)";

// Holds every subcommand's options and the CLI11 app bound to them.
struct parser {
  CLI::App app{"prsgd — Parallel Restarted SGD: workers train locally and average every I steps.", "prsgd"};
  head_options head;
  averager_options averager;
  worker_options worker;
  local_options local;
  keygen_options keygen;
  export_options export_;
  eval_options eval;
  predict_options predict;
  CLI::App* export_cmd = nullptr;
  CLI::App* eval_cmd = nullptr;
  CLI::App* predict_cmd = nullptr;
  CLI::App* head_cmd = nullptr;
  CLI::App* averager_cmd = nullptr;
  CLI::App* worker_cmd = nullptr;
  CLI::App* local_cmd = nullptr;
  CLI::App* keygen_cmd = nullptr;

  parser() {
    // A repeated scalar flag takes its last value, so scripts can append overrides.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.set_version_flag("--version", std::string{"prsgd "} + PRSGD_VERSION_STRING);
    app.require_subcommand(1);
    app.footer(
        "Quick start (4 workers on this machine):\n"
        "  prsgd local --workers 4 --model fmnist-mlp --interval 8 --epochs 2\n"
        "Run `prsgd <subcommand> --help` for its options; docs/cli.md has everything.");

    local_cmd = app.add_subcommand("local", "Start an averager and N workers as processes on this machine");
    add_output(*local_cmd, local.output);
    add_model(*local_cmd, local.model);
    add_schedule(*local_cmd, local.schedule);
    add_liveness(*local_cmd, local.liveness);
    local_cmd->add_option("--workers", local.workers, "Number of worker processes")
        ->capture_default_str()
        ->group("Cluster");
    add_list(*local_cmd, "--slowdown-ms", local.slowdown_ms,
             "Artificial per-step delay in ms: one value, or one per worker (e.g. 0,0,20)")
        ->group("Cluster");
    local_cmd->add_flag("--with-head", local.with_head, "Also start a head node")->group("Cluster");
    local_cmd->add_option("--log-dir", local.log_dir, "Directory for the children's logs")
        ->capture_default_str()
        ->group("Cluster");
    local_cmd->add_option("--port", local.port, "Averager port on 127.0.0.1 (0 = any port the system chooses)")
        ->capture_default_str()
        ->group("Cluster");
    local_cmd->add_option("--grace-s", local.grace_s, "Seconds workers get to exit after the averager")
        ->capture_default_str()
        ->group("Cluster");
    local_cmd->footer("Example: prsgd local --workers 4 --model fmnist-mlp --interval 8 --epochs 2 "
                      "--metrics-jsonl run.jsonl");
    add_save(*local_cmd, local.save);

    averager_cmd = app.add_subcommand("averager", "Run the averager: restart barrier, averaging, checkpoints");
    averager_cmd->add_option("--listen", averager.listen, "Endpoint to bind, e.g. tcp://0.0.0.0:7500 (required)")
        ->group("Network");
    averager_cmd->add_option("--head", averager.head, "Head endpoint to register with (optional)")->group("Network");
    averager_cmd->add_option("--endpoint-file", averager.endpoint_file, endpoint_file_help)
        ->type_name("FILE")
        ->group("Network");
    add_output(*averager_cmd, averager.output);
    add_model(*averager_cmd, averager.model);
    add_schedule(*averager_cmd, averager.schedule);
    add_liveness(*averager_cmd, averager.liveness);
    add_security(*averager_cmd, averager.security);
    averager_cmd->footer("Example: prsgd averager --listen tcp://0.0.0.0:7500 --model fmnist-mlp --interval 8");
    add_save(*averager_cmd, averager.save);

    worker_cmd = app.add_subcommand("worker", "Run a worker: local SGD on one shard, joins an averager");
    worker_cmd->add_option("--averager", worker.averager, "Averager endpoint, e.g. tcp://10.77.0.1:7500")
        ->group("Network");
    worker_cmd->add_option("--head", worker.head, "Head endpoint to find the averager through")->group("Network");
    worker_cmd->add_option("--head-timeout-ms", worker.head_timeout_ms,
                           "With --head: give up when no averager is registered within this many ms")
        ->capture_default_str()
        ->group("Network");
    worker_cmd->add_option("--slowdown-ms", worker.slowdown_ms, "Artificial delay per local step in ms")
        ->capture_default_str()
        ->group("Network");
    add_output(*worker_cmd, worker.output);
    add_model(*worker_cmd, worker.model);
    add_liveness(*worker_cmd, worker.liveness);
    add_security(*worker_cmd, worker.security);
    worker_cmd->footer("Example: prsgd worker --averager tcp://127.0.0.1:7500 --model fmnist-mlp");

    head_cmd = app.add_subcommand("head", "Run the head node: membership and names for a multi-host cluster");
    head_cmd->add_option("--listen", head.listen, "Endpoint to bind, e.g. tcp://0.0.0.0:7400 (required)")
        ->group("Network");
    head_cmd->add_option("--endpoint-file", head.endpoint_file, endpoint_file_help)
        ->type_name("FILE")
        ->group("Network");
    add_output(*head_cmd, head.output);
    add_liveness(*head_cmd, head.liveness);
    add_security(*head_cmd, head.security);

    keygen_cmd = app.add_subcommand("keygen", "Write a CURVE key pair (NAME.public, NAME.secret) in Z85");
    keygen_cmd->add_option("--out-dir", keygen.out_dir, "Directory to write into")->capture_default_str();
    keygen_cmd->add_option("--name", keygen.name, "Base file name")->capture_default_str();
    keygen_cmd->add_flag("--force", keygen.force, "Overwrite existing key files");

    export_cmd = app.add_subcommand("export", "Write the model of a job's newest checkpoint as safetensors");
    export_cmd->add_option("--checkpoint-dir", export_.checkpoint_dir, "Checkpoint directory of the job (required)")
        ->type_name("DIR");
    export_cmd->add_option("--out", export_.out, "safetensors file to write (required)")->type_name("FILE");
    export_cmd->add_option("--model", export_.model,
                           "Model name, for checkpoints of older prsgd versions that do not record it");
    export_cmd->add_option("--dataset", export_.dataset, "With --model: its data set (auto | fashion-mnist | kws)")
        ->capture_default_str();
    add_tool_output(*export_cmd, export_.output);
    export_cmd->footer("Example: prsgd export --checkpoint-dir ckpt --out model.safetensors");

    eval_cmd = app.add_subcommand("eval", "Score safetensors weights on the test set: accuracy, per class, confusion");
    eval_cmd->add_option("--weights", eval.weights, "safetensors file (required)")->type_name("FILE");
    add_tool_model(*eval_cmd, eval.model);
    eval_cmd->add_flag("--json", eval.json, "Print JSON instead of tables");
    eval_cmd->add_option("--predictions", eval.predictions, "Write index,label,predicted per test sample to FILE")
        ->type_name("FILE");
    add_tool_output(*eval_cmd, eval.output);
    eval_cmd->footer("Example: prsgd eval --model fmnist-cnn --weights model.safetensors");

    predict_cmd = app.add_subcommand("predict", "Print the top-k classes of inputs (IDX, PNG, NPY images; WAV)");
    predict_cmd->add_option("--weights", predict.weights, "safetensors file (required)")->type_name("FILE");
    add_tool_model(*predict_cmd, predict.model);
    predict_cmd->add_option("--top-k", predict.top_k, "Classes to print per input")->capture_default_str();
    predict_cmd->add_flag("--json", predict.json, "Print one JSON object per sample");
    predict_cmd->add_option("inputs", predict.inputs, "Input files")->type_name("INPUT...");
    add_tool_output(*predict_cmd, predict.output);
    predict_cmd->footer("Example: prsgd predict --model fmnist-cnn --weights model.safetensors --top-k 3 shoe.png");
  }
};

std::string node_to_text(const YAML::Node& n) { return n.Scalar(); }

// Applies the YAML file's keys to the options of `sub` that were not given on the command line.
expected<void> apply_config(CLI::App& sub, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return fail(errc::not_found, "config file '" + path + "' does not exist or is not a file");
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return bad("config file '" + path + "': " + one_line(e.what()));
  }
  if (root.IsNull()) {
    return {};
  }
  if (!root.IsMap()) {
    return bad("config file '" + path + "' must be a mapping of option: value");
  }
  for (const auto& kv : root) {
    std::string key = kv.first.Scalar();
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');
    CLI::Option* opt = (name == "config" || name == "help" || name == "version")
                           ? nullptr
                           : sub.get_option_no_throw("--" + name);
    if (opt == nullptr) {
      return bad("unknown key '" + key + "' in config file '" + path + "' (see prsgd " + sub.get_name() +
                 " --help)");
    }
    if (opt->count() > 0) {
      continue;  // the command line wins
    }
    std::vector<std::string> values;
    const YAML::Node& v = kv.second;
    if (v.IsScalar()) {
      values.push_back(node_to_text(v));
    } else if (v.IsSequence()) {
      for (const auto& item : v) {
        if (!item.IsScalar()) {
          return bad("config file '" + path + "': key '" + key + "' must be a scalar or a list of scalars");
        }
        values.push_back(node_to_text(item));
      }
    } else {
      return bad("config file '" + path + "': key '" + key + "' must be a scalar or a list of scalars");
    }
    try {
      if (opt->get_expected_min() == 0) {
        if (values.size() != 1) {
          return bad("config file '" + path + "': key '" + key + "' must be true or false");
        }
        const auto flag = CLI::detail::to_flag_value(values.front());  // throws on non-boolean text
        opt->add_result(flag > 0 ? "true" : "false");
      } else {
        opt->add_result(values);
      }
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return bad("config file '" + path + "': key '" + key + "': " + one_line(e.what()));
    } catch (const std::exception& e) {
      return bad("config file '" + path + "': key '" + key + "': bad value (" + one_line(e.what()) + ")");
    }
  }
  return {};
}

expected<void> one_of(const std::string& value, std::initializer_list<std::string_view> allowed,
                      const std::string& what) {
  for (auto a : allowed) {
    if (value == a) {
      return {};
    }
  }
  std::string list;
  for (auto a : allowed) {
    list += list.empty() ? "" : "|";
    list += a;
  }
  return bad(what + " must be one of " + list + " (got '" + value + "')");
}

expected<void> at_least(long long value, long long min, const std::string& what) {
  if (value < min) {
    return bad(what + " must be at least " + str(min) + " (got " + str(value) + ")");
  }
  return {};
}

// Turns an enum parser's error into the option's usage error: "--deadline: unknown deadline 'x' (none | ...)".
template <class T>
expected<void> parsed(const std::string& what, const expected<T>& value, const std::string& also = {}) {
  if (!value) {
    return bad(what + ": " + value.error().context + (also.empty() ? "" : ", or " + also));
  }
  return {};
}

prsgd::unexpected in_sub(const CLI::App& sub, const error& e) {
  return fail(e.code, "prsgd " + sub.get_name() + ": " + e.context);
}

template <class Options>
expected<command> finish(CLI::App& sub, Options& o, const std::string& config_file) {
  if (!config_file.empty()) {
    auto applied = apply_config(sub, config_file);
    if (!applied) {
      return in_sub(sub, applied.error());
    }
  }
  auto valid = validate(o);
  if (!valid) {
    return in_sub(sub, valid.error());
  }
  return command{o};
}

}  // namespace

std::vector<std::string> to_arguments(const liveness_options& o) {
  auto copy = o;
  return table_arguments(liveness_table(copy));
}

std::vector<std::string> to_arguments(const model_options& o) {
  auto copy = o;
  return table_arguments(model_table(copy));
}

std::vector<std::string> to_arguments(const save_options& o) {
  auto copy = o;
  return table_arguments(save_table(copy));
}

std::vector<std::string> to_arguments(const schedule_options& o) {
  auto copy = o;
  return table_arguments(schedule_table(copy));
}

std::string program_help() {
  parser p;
  return p.app.help();
}

expected<void> validate_endpoint(const std::string& endpoint, const std::string& what) {
  const auto scheme_end = endpoint.find("://");
  if (scheme_end == std::string::npos) {
    return bad(what + " must look like tcp://HOST:PORT, ipc://PATH or inproc://NAME (got '" + endpoint + "')");
  }
  const std::string scheme = endpoint.substr(0, scheme_end);
  const std::string rest = endpoint.substr(scheme_end + 3);
  if (scheme == "ipc" || scheme == "inproc") {
    if (rest.empty()) {
      return bad(what + " has an empty " + scheme + " name (got '" + endpoint + "')");
    }
    return {};
  }
  if (scheme != "tcp") {
    return bad(what + " must use tcp://, ipc:// or inproc:// (got '" + endpoint + "')");
  }
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return bad(what + " must be tcp://HOST:PORT (got '" + endpoint + "')");
  }
  const std::string port = rest.substr(colon + 1);
  if (port == "*") {
    return {};  // ZeroMQ picks an ephemeral port
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) {
        return c >= '0' && c <= '9';
      })) {
    return bad(what + " has a bad port (got '" + endpoint + "')");
  }
  const int p = std::stoi(port);
  if (p < 1 || p > 65535) {
    return bad(what + " port must be 1..65535 (got '" + endpoint + "')");
  }
  return {};
}

expected<void> validate(const output_options& o) {
  log::level lvl{};
  if (!log::parse_level(o.log_level, lvl)) {
    return bad("--log-level must be one of trace|debug|info|warn|error|off (got '" + o.log_level + "')");
  }
  for (const auto& p : o.plugins) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec)) {
      return fail(errc::not_found, "--plugin file '" + p + "' does not exist");
    }
  }
  if (o.metrics_port < 0 || o.metrics_port > 65535) {
    return bad("--metrics-port must be 0..65535 (got " + str(o.metrics_port) + ")");
  }
  return one_of(o.progress, {"auto", "plain", "off"}, "--progress");
}

expected<void> validate(const liveness_options& o) {
  PRSGD_TRY(at_least(o.heartbeat_ms, 1, "--heartbeat-ms"));
  if (o.heartbeat_timeout_ms <= o.heartbeat_ms) {
    return bad("--heartbeat-timeout-ms must be greater than --heartbeat-ms (got " + str(o.heartbeat_timeout_ms) +
               " <= " + str(o.heartbeat_ms) + ")");
  }
  return {};
}

expected<void> validate(const security_options& o) {
  const bool any = !o.curve_public_key.empty() || !o.curve_secret_key.empty();
  if (any && (o.curve_public_key.empty() || o.curve_secret_key.empty())) {
    return bad("--curve-public-key and --curve-secret-key must be given together");
  }
  if (!any && (!o.curve_server_key.empty() || !o.curve_allow.empty())) {
    return bad("--curve-server-key and --curve-allow need this process's own --curve-public-key and "
               "--curve-secret-key");
  }
  std::vector<const std::string*> files{&o.curve_public_key, &o.curve_secret_key, &o.curve_server_key};
  for (const auto& f : o.curve_allow) {
    files.push_back(&f);
  }
  for (const auto* f : files) {
    std::error_code ec;
    const bool allow_dir = f != &o.curve_public_key && f != &o.curve_secret_key && f != &o.curve_server_key &&
                           std::filesystem::is_directory(*f, ec);
    if (!f->empty() && !allow_dir && !std::filesystem::is_regular_file(*f, ec)) {
      return fail(errc::not_found, "key file '" + *f + "' does not exist");
    }
  }
  return {};
}

/// Returns true when `endpoint` can only be reached from this host: ipc, inproc, or tcp on a loopback host.
bool is_local_endpoint(const std::string& endpoint) {
  const auto scheme_end = endpoint.find("://");
  if (scheme_end == std::string::npos) {
    return false;
  }
  const std::string scheme = endpoint.substr(0, scheme_end);
  if (scheme == "ipc" || scheme == "inproc") {
    return true;
  }
  const std::string rest = endpoint.substr(scheme_end + 3);
  std::string host = rest.substr(0, rest.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

/// Refuses a non-loopback `endpoint` (given as `what`) without CURVE keys, unless --insecure.
expected<void> require_curve_off_loopback(const std::string& endpoint, const std::string& what,
                                          const security_options& s) {
  if (s.insecure || !s.curve_public_key.empty() || is_local_endpoint(endpoint)) {
    return {};
  }
  return bad(what + " " + endpoint +
             " is not a loopback address and no CURVE keys are given: pass --curve-public-key and "
             "--curve-secret-key (from prsgd keygen; see docs/security.md), or --insecure to accept "
             "unauthenticated, unencrypted traffic");
}

expected<void> validate(const model_options& o) {
  if (o.model.empty()) {
    return bad("--model must not be empty");
  }
  if (!o.data_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(o.data_dir, ec)) {
      return fail(errc::not_found, "--data-dir '" + o.data_dir + "' is not a directory");
    }
  }
  PRSGD_TRY(at_least(o.batch, 1, "--batch"));
  if (!(o.lr > 0)) {
    return bad("--lr must be > 0 (got " + str(o.lr) + ")");
  }
  if (!(o.momentum >= 0 && o.momentum < 1)) {
    return bad("--momentum must be in [0, 1) (got " + str(o.momentum) + ")");
  }
  PRSGD_TRY(one_of(o.momentum_on_restart, {"keep", "reset"}, "--momentum-on-restart"));
  // The name itself is checked once the plugins are loaded: a plugin may register data sets.
  if (o.dataset.empty()) {
    return bad("--dataset must not be empty");
  }
  for (const auto& kv : o.data_options) {
    if (kv.find('=') == std::string::npos || kv.front() == '=') {
      return bad("--data-option must be KEY=VALUE (got '" + kv + "')");
    }
  }
  if (!(o.dirichlet_alpha > 0)) {
    return bad("--dirichlet-alpha must be > 0 (got " + str(o.dirichlet_alpha) + ")");
  }
  return {};
}

expected<void> validate(const schedule_options& o) {
  PRSGD_TRY(at_least(o.epochs, 0, "--epochs"));
  PRSGD_TRY(at_least(o.rounds, 0, "--rounds"));
  if (o.epochs == 0 && o.rounds == 0) {
    return bad("one of --epochs or --rounds must be > 0");
  }
  PRSGD_TRY(at_least(o.interval, 1, "--interval"));
  for (int i : o.intervals) {
    PRSGD_TRY(at_least(i, 1, "every --intervals value"));
  }
  PRSGD_TRY(parsed("--interval-policy", algorithms::parse_interval_kind(o.interval_policy)));
  if (o.interval_policy == "per-worker" && o.intervals.empty()) {
    return bad("--interval-policy per-worker needs --intervals, e.g. --intervals 4,8,16");
  }
  if (o.averaging != "auto") {
    PRSGD_TRY(parsed("--averaging", algorithms::parse_averaging_rule(o.averaging), "auto"));
  }
  PRSGD_TRY(parsed("--aggregate", algorithms::parse_aggregate_rule(o.aggregate)));
  if (!(o.trim >= 0 && o.trim < 0.5)) {
    return bad("--trim must be in [0, 0.5) (got " + str(o.trim) + ")");
  }
  if (!(std::isfinite(o.clip) && o.clip >= 0)) {
    return bad("--clip must be >= 0 (got " + str(o.clip) + ")");
  }
  if (!(o.screen_k == 0 || (std::isfinite(o.screen_k) && o.screen_k >= 1))) {
    return bad("--screen-k must be 0 (off) or >= 1 (got " + str(o.screen_k) + ")");
  }
  PRSGD_TRY(parsed("--deadline", actors::parse_deadline_policy(o.deadline)));
  PRSGD_TRY(at_least(o.deadline_ms, 1, "--deadline-ms"));
  if (!(o.deadline_mad_k > 0)) {
    return bad("--deadline-mad-k must be > 0 (got " + str(o.deadline_mad_k) + ")");
  }
  PRSGD_TRY(at_least(o.quorum, 1, "--quorum"));
  PRSGD_TRY(parsed("--step-size", algorithms::parse_lr_kind(o.step_size)));
  if (o.step_size != "constant" && o.step_size != "paper") {
    return bad("--step-size must be constant or paper for the averager (got '" + o.step_size + "')");
  }
  PRSGD_TRY(at_least(o.warmup_rounds, 0, "--warmup-rounds"));
  if (o.outer != "none") {
    PRSGD_TRY(parsed("--outer", algorithms::parse_outer_kind(o.outer), "none"));
  }
  if (o.mode == "minibatch" && o.outer != "none") {
    return bad("--outer applies to --mode restarted; minibatch mode uses --momentum for the averager's step");
  }
  if (!(o.outer_lr > 0)) {
    return bad("--outer-lr must be > 0 (got " + str(o.outer_lr) + ")");
  }
  if (!(o.outer_momentum >= 0 && o.outer_momentum < 1)) {
    return bad("--outer-momentum must be in [0, 1) (got " + str(o.outer_momentum) + ")");
  }
  PRSGD_TRY(at_least(o.eval_every, 0, "--eval-every"));
  PRSGD_TRY(at_least(o.checkpoint_every, 0, "--checkpoint-every"));
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    return bad("--checkpoint-every needs --checkpoint-dir");
  }
  if ((o.resume || o.fresh) && o.checkpoint_dir.empty()) {
    return bad(std::string(o.resume ? "--resume" : "--fresh") + " needs --checkpoint-dir");
  }
  if (o.resume && o.fresh) {
    return bad("--resume and --fresh contradict each other: pick one");
  }
  PRSGD_TRY(at_least(o.min_workers, 0, "--min-workers"));
  PRSGD_TRY(at_least(o.idle_rounds, 0, "--idle-rounds"));
  PRSGD_TRY(at_least(o.max_workers, 0, "--max-workers"));
  if (o.max_workers > 0 && o.max_workers < o.min_workers) {
    return bad("--max-workers must not be below --min-workers (got " + str(o.max_workers) + " < " +
               str(o.min_workers) + ")");
  }
  PRSGD_TRY(parsed("--mode", actors::parse_training_mode(o.mode)));
  return {};
}

expected<void> validate(const head_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.security));
  if (o.listen.empty()) {
    return bad("needs --listen ENDPOINT, e.g. --listen tcp://0.0.0.0:7400");
  }
  PRSGD_TRY(validate_endpoint(o.listen, "--listen"));
  return require_curve_off_loopback(o.listen, "--listen", o.security);
}

expected<void> validate(const averager_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.security));
  PRSGD_TRY(validate(o.model));
  PRSGD_TRY(validate(o.schedule));
  if (o.listen.empty()) {
    return bad("needs --listen ENDPOINT, e.g. --listen tcp://0.0.0.0:7500");
  }
  PRSGD_TRY(validate_endpoint(o.listen, "--listen"));
  PRSGD_TRY(require_curve_off_loopback(o.listen, "--listen", o.security));
  if (!o.head.empty()) {
    PRSGD_TRY(validate_endpoint(o.head, "--head"));
    PRSGD_TRY(require_curve_off_loopback(o.head, "--head", o.security));
  }
  return validate(o.save);
}

expected<void> validate(const worker_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.security));
  PRSGD_TRY(validate(o.model));
  if (o.averager.empty() && o.head.empty()) {
    return bad("needs --averager ENDPOINT (or --head ENDPOINT)");
  }
  if (!o.averager.empty()) {
    PRSGD_TRY(validate_endpoint(o.averager, "--averager"));
    PRSGD_TRY(require_curve_off_loopback(o.averager, "--averager", o.security));
  }
  if (!o.head.empty()) {
    PRSGD_TRY(validate_endpoint(o.head, "--head"));
    PRSGD_TRY(require_curve_off_loopback(o.head, "--head", o.security));
  }
  PRSGD_TRY(at_least(o.head_timeout_ms, 1, "--head-timeout-ms"));
  if (!o.security.curve_public_key.empty() && o.security.curve_server_key.empty()) {
    return bad("a worker with CURVE keys needs --curve-server-key (the averager's public key file)");
  }
  return at_least(o.slowdown_ms, 0, "--slowdown-ms");
}

expected<void> validate(const local_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate(o.liveness));
  PRSGD_TRY(validate(o.model));
  PRSGD_TRY(validate(o.schedule));
  PRSGD_TRY(at_least(o.workers, 1, "--workers"));
  if (o.slowdown_ms.size() > 1 && o.slowdown_ms.size() != static_cast<std::size_t>(o.workers)) {
    return bad("--slowdown-ms needs one value or one per worker (got " + str(o.slowdown_ms.size()) + " for " +
               str(o.workers) + " workers)");
  }
  for (int s : o.slowdown_ms) {
    PRSGD_TRY(at_least(s, 0, "every --slowdown-ms value"));
  }
  if (o.schedule.interval_policy == "per-worker" && o.schedule.intervals.size() > 1 &&
      o.schedule.intervals.size() != static_cast<std::size_t>(o.workers)) {
    return bad("--intervals needs one value per worker (got " + str(o.schedule.intervals.size()) + " for " +
               str(o.workers) + " workers)");
  }
  if (o.schedule.min_workers > o.workers) {
    return bad("--min-workers must not exceed --workers (got " + str(o.schedule.min_workers) + " > " +
               str(o.workers) + ")");
  }
  if (o.log_dir.empty()) {
    return bad("--log-dir must not be empty");
  }
  if (o.port < 0 || o.port > 65535) {
    return bad("--port must be 0..65535 (got " + str(o.port) + ")");
  }
  PRSGD_TRY(validate(o.save));
  return at_least(o.grace_s, 0, "--grace-s");
}

expected<void> validate(const keygen_options& o) {
  if (o.out_dir.empty()) {
    return bad("--out-dir must not be empty");
  }
  if (o.name.empty() || o.name.find('/') != std::string::npos) {
    return bad("--name must be a plain file name (got '" + o.name + "')");
  }
  return {};
}

std::string best_model_path(const std::string& file) {
  const std::filesystem::path p{file};
  if (!p.has_extension()) {
    return file + ".best";
  }
  auto out = p;
  out.replace_extension(".best" + p.extension().string());
  return out.string();
}

expected<void> validate(const save_options& o) {
  if (o.save_best && o.save_model.empty()) {
    return bad("--save-best needs --save-model FILE (the best model goes beside it, e.g. model.best.safetensors)");
  }
  return {};
}

namespace {
// The model tools take --model from the weights file when it is not given; the rest is checked as usual.
expected<void> validate_tool_model(const model_options& o) {
  model_options m = o;
  if (m.model.empty()) {
    m.model = "(from the weights file)";
  }
  return validate(m);
}
}  // namespace

expected<void> validate(const export_options& o) {
  PRSGD_TRY(validate(o.output));
  if (o.checkpoint_dir.empty() || o.out.empty()) {
    return bad("needs --checkpoint-dir DIR and --out FILE");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(o.checkpoint_dir, ec)) {
    return fail(errc::not_found, "--checkpoint-dir '" + o.checkpoint_dir + "' is not a directory");
  }
  return one_of(o.dataset, {"auto", "fashion-mnist", "kws"}, "--dataset");
}

expected<void> validate(const eval_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate_tool_model(o.model));
  if (o.weights.empty()) {
    return bad("needs --weights FILE");
  }
  return {};
}

expected<void> validate(const predict_options& o) {
  PRSGD_TRY(validate(o.output));
  PRSGD_TRY(validate_tool_model(o.model));
  if (o.weights.empty()) {
    return bad("needs --weights FILE");
  }
  PRSGD_TRY(at_least(o.top_k, 1, "--top-k"));
  if (o.inputs.empty()) {
    return bad("needs at least one INPUT file (IDX, PNG, NPY or WAV)");
  }
  return {};
}

expected<command> parse_command_line(const std::vector<std::string>& args) {
  parser p;
  if (args.size() <= 1) {
    return command{help_request{p.app.help()}};
  }
  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const auto& a : args) {
    argv.push_back(a.c_str());
  }
  try {
    p.app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    return command{help_request{p.app.help()}};
  } catch (const CLI::CallForAllHelp&) {
    return command{help_request{p.app.help("", CLI::AppFormatMode::All)}};
  } catch (const CLI::CallForVersion& v) {
    std::string text = v.what();
    if (text.empty() || text.back() != '\n') {
      text += '\n';
    }
    return command{help_request{text}};
  } catch (const CLI::ParseError& e) {
    if (p.app.get_subcommands().empty() && !args[1].empty() && args[1].front() != '-') {
      return bad("prsgd: unknown subcommand '" + args[1] +
                 "' (use head, averager, worker, local, keygen, export, eval or predict)");
    }
    std::string where = "prsgd";
    for (const auto* sub : p.app.get_subcommands()) {
      where += " " + sub->get_name();
    }
    return bad(where + ": " + one_line(e.what()));
  }
  if (p.local_cmd->parsed()) {
    return finish(*p.local_cmd, p.local, p.local.output.config_file);
  }
  if (p.averager_cmd->parsed()) {
    return finish(*p.averager_cmd, p.averager, p.averager.output.config_file);
  }
  if (p.worker_cmd->parsed()) {
    return finish(*p.worker_cmd, p.worker, p.worker.output.config_file);
  }
  if (p.head_cmd->parsed()) {
    return finish(*p.head_cmd, p.head, p.head.output.config_file);
  }
  if (p.keygen_cmd->parsed()) {
    return finish(*p.keygen_cmd, p.keygen, std::string{});
  }
  if (p.export_cmd->parsed()) {
    return finish(*p.export_cmd, p.export_, p.export_.output.config_file);
  }
  if (p.eval_cmd->parsed()) {
    return finish(*p.eval_cmd, p.eval, p.eval.output.config_file);
  }
  if (p.predict_cmd->parsed()) {
    return finish(*p.predict_cmd, p.predict, p.predict.output.config_file);
  }
  return bad("prsgd: a subcommand is required (head, averager, worker, local, keygen, export, eval, predict)");
}

}  // namespace prsgd::cli
