// SPDX-License-Identifier: Apache-2.0
// The option groups several subcommands share, as tables: registering them with CLI11 and turning a parsed
// group back into arguments for the processes `prsgd local` starts.
#include "option_tables.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <type_traits>

namespace prsgd::cli {
namespace detail {

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') {
    text.pop_back();
  }
  return text;
}

void add_output(CLI::App& app, output_options& o, bool metrics) {
  // A worker or head takes the metrics options and ignores them, so one config file or script line serves
  // every role; its --help does not list them (the empty group hides an option).
  const std::string metrics_group = metrics ? "Common" : "";
  app.add_option("--config", o.config_file,
                 "YAML file with any of these options (keys = long names without --); flags override it")
      ->type_name("FILE")
      ->group("Common");
  app.add_option("--log-level", o.log_level, "trace|debug|info|warn|error|off")->capture_default_str()->group("Common");
  app.add_option("--plugin", o.plugins, "Shared library to load at start (repeatable); see docs/cli.md")
      ->type_name("PATH")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group("Common");
  app.add_option("--metrics-jsonl", o.metrics_jsonl,
                 "Write one JSON object per closed round to FILE (a new job truncates it, a resumed one appends)")
      ->type_name("FILE")
      ->group(metrics_group);
  app.add_option("--metrics-port", o.metrics_port, "Serve Prometheus metrics on 127.0.0.1:PORT (0 = off)")
      ->capture_default_str()
      ->group(metrics_group);
  app.add_option("--metrics-bind", o.metrics_bind,
                 "Serve Prometheus metrics on ADDR:PORT instead, e.g. 0.0.0.0:9400 (read-only; off loopback on "
                 "purpose)")
      ->type_name("ADDR:PORT")
      ->group(metrics_group);
  app.add_option("--progress", o.progress, "auto (updating line on a terminal) | plain | off")
      ->capture_default_str()
      ->group(metrics_group);
}

std::vector<option_def> liveness_table(liveness_options& o) {
  return {
      {"--heartbeat-ms", "Heartbeat interval in ms", &o.heartbeat_ms},
      {"--heartbeat-timeout-ms", "Declare a silent peer dead after this many ms", &o.heartbeat_timeout_ms},
      {"--slowest-link-mbit",
       "A peer sending a model gets the timeout plus the model's transfer time at this rate (Mbit/s)",
       &o.slowest_link_mbit},
  };
}

std::vector<option_def> model_table(model_options& o) {
  return {
      {"--model", "A registered model (list: prsgd models) or a spec: mlp:IN-H-...-OUT, cnn:...", &o.model},
      {"--dataset",
       "auto (kws for kws-* models, else fashion-mnist), fashion-mnist, kws, npy, csv, wav-folder or a plugin's "
       "(list: prsgd datasets)",
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
      {"--evaluate-on", "averager (it scores x̄ on the test set itself) | evaluators (`prsgd evaluator` processes do)",
       &o.evaluate_on},
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
      {"--wire-dtype", "Model payloads on the wire: f32 | bf16 | f16 | int8 (lossy: changes with error feedback)",
       &o.wire_dtype},
      {"--topology", "star (the averager averages whole models) | sharded (--shards owner processes average slices)",
       &o.topology},
      {"--shards", "Shard owner processes of a sharded job (local: 0 = one per worker)", &o.shards},
      {"--gather",
       "How a sharded job's members get x̄: direct (from every owner) | ring (around the owners, "
       "then from the owner on their host)",
       &o.gather},
      {"--upload-buffer-kib",
       "Sharded: the kernel send buffer of each worker's connections to owners on other hosts, in KiB "
       "(0 = autotuned); small keeps the uploads from overflowing shallow link queues",
       &o.upload_buffer_kib},
      {"--wire-compress",
       "Sharded: compress the slices that travel between hosts: none | zstd (lossless; pays on slow links, "
       "costs CPU on fast ones)",
       &o.wire_compress},
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
    if (!def.type_name.empty()) {
      opt->type_name(def.type_name);
    }
  }
}

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
              out.push_back(def.path ? std::filesystem::absolute(value).string() : value);
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

void add_security(CLI::App& app, security_options& o, bool server, bool client) {
  app.add_option("--curve-public-key", o.curve_public_key, "This process's CURVE public key file (prsgd keygen)")
      ->type_name("FILE")
      ->group("Security");
  app.add_option("--curve-secret-key", o.curve_secret_key, "This process's CURVE secret key file")
      ->type_name("FILE")
      ->group("Security");
  // The side a role does not play is accepted (and ignored) but not listed.
  app.add_option("--curve-allow", o.curve_allow,
                 "Client public key file, or a directory of .public files, allowed to connect (repeatable; "
                 "default: any client with the server key)")
      ->type_name("PATH")
      ->group(server ? "Security" : "");
  app.add_option("--curve-server-key", o.curve_server_key, "The CURVE public key file of the server to connect to")
      ->type_name("FILE")
      ->group(client ? "Security" : "");
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

// ---- watching and steering a running job: the operators and the dashboard ------------------------

std::vector<option_def> operations_table(operations_options& o) {
  return {
      {"--operator-key",
       "Public key file of a client that may steer the job with `prsgd ctl` (repeatable; with CURVE; without "
       "CURVE only loopback clients may steer)",
       &o.operator_keys, true, "FILE"},
      {"--http-bind", "Serve the dashboard and /api on ADDR:PORT (PORT alone: 127.0.0.1; 0: any free port)",
       &o.http_bind, false, "ADDR:PORT"},
      {"--http-token-file", "File with a bearer token that allows steering over HTTP (default: read-only)",
       &o.http_token_file, true, "FILE"},
      {"--http-url-file", "Once the dashboard listens, write its URL to FILE", &o.http_url_file, true, "FILE"},
  };
}

void add_operations(CLI::App& app, operations_options& o) { add_table(app, operations_table(o), "Operations"); }

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

}  // namespace detail

std::vector<std::string> to_arguments(const liveness_options& o) {
  auto copy = o;
  return detail::table_arguments(detail::liveness_table(copy));
}

std::vector<std::string> to_arguments(const model_options& o) {
  auto copy = o;
  return detail::table_arguments(detail::model_table(copy));
}

std::vector<std::string> to_arguments(const save_options& o) {
  auto copy = o;
  return detail::table_arguments(detail::save_table(copy));
}

std::vector<std::string> to_arguments(const operations_options& o) {
  auto copy = o;
  return detail::table_arguments(detail::operations_table(copy));
}

std::vector<std::string> to_arguments(const schedule_options& o) {
  auto copy = o;
  return detail::table_arguments(detail::schedule_table(copy));
}

}  // namespace prsgd::cli
