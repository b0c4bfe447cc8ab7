// SPDX-License-Identifier: Apache-2.0
// The command line: every subcommand and its options, assembled from the shared tables, parsed, overlaid
// with --config and validated.
#include "prsgd/cli/options.hpp"

#include <CLI/CLI.hpp>

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "option_tables.hpp"

#ifndef PRSGD_VERSION_STRING
#define PRSGD_VERSION_STRING "unknown"
#endif

namespace prsgd::cli {
namespace {

using namespace detail;

constexpr const char* endpoint_file_help =
    "Once bound, write the bound endpoint to FILE (e.g. with --listen tcp://127.0.0.1:*)";

// The options of `prsgd status` and `prsgd ctl`: where the averager is, and the client's CURVE keys.
void add_operator(CLI::App& cmd, operator_options& o) {
  cmd.add_option("--averager", o.averager, "The averager's endpoint, e.g. tcp://10.77.0.1:7500")->group("Network");
  cmd.add_option("--head", o.head, "Head endpoint to find the averager through")->group("Network");
  cmd.add_option("--timeout-ms", o.timeout_ms, "Give up when no answer came within this many ms")
      ->capture_default_str()
      ->group("Network");
  add_security(cmd, o.security, /*server=*/false, /*client=*/true);
  add_tool_output(cmd, o.output);
}

// The options of `prsgd worker` and `prsgd evaluator` that say where the averager is.
void add_averager_address(CLI::App& cmd, averager_address_options& o) {
  cmd.add_option("--averager", o.averager, "Averager endpoint, e.g. tcp://10.77.0.1:7500")->group("Network");
  cmd.add_option("--head", o.head, "Head endpoint to find the averager through")->group("Network");
  cmd.add_option("--head-timeout-ms", o.head_timeout_ms,
                 "With --head: give up when no averager is registered within this many ms")
      ->capture_default_str()
      ->group("Network");
}

// Holds every subcommand's options and the CLI11 app bound to them.
struct parser {
  CLI::App app{"prsgd — Parallel Restarted SGD: workers train locally and average every I steps.", "prsgd"};
  head_options head;
  averager_options averager;
  worker_options worker;
  evaluator_options evaluator;
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
  CLI::App* evaluator_cmd = nullptr;
  CLI::App* local_cmd = nullptr;
  CLI::App* keygen_cmd = nullptr;
  plot_options plot;
  list_options models;
  list_options datasets;
  completion_options completion;
  CLI::App* plot_cmd = nullptr;
  CLI::App* models_cmd = nullptr;
  CLI::App* datasets_cmd = nullptr;
  CLI::App* completion_cmd = nullptr;
  operator_options status;
  operator_options ctl;
  CLI::App* status_cmd = nullptr;
  CLI::App* ctl_cmd = nullptr;
  CLI::Option* watch_opt = nullptr;

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
    add_output(*local_cmd, local.output, true);
    add_model(*local_cmd, local.model);
    add_schedule(*local_cmd, local.schedule);
    add_liveness(*local_cmd, local.liveness);
    local_cmd->add_option("--workers", local.workers, "Number of worker processes")
        ->capture_default_str()
        ->group("Cluster");
    local_cmd
        ->add_option("--evaluators", local.evaluators,
                     "Evaluator processes that score x̄ instead of the averager (> 0 sets --evaluate-on evaluators)")
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
    local_cmd->footer(
        "Example: prsgd local --workers 4 --model fmnist-mlp --interval 8 --epochs 2 "
        "--metrics-jsonl run.jsonl");
    add_save(*local_cmd, local.save);
    add_operations(*local_cmd, local.operations);

    averager_cmd = app.add_subcommand("averager", "Run the averager: restart barrier, averaging, checkpoints");
    averager_cmd->add_option("--listen", averager.listen, "Endpoint to bind, e.g. tcp://0.0.0.0:7500 (required)")
        ->group("Network");
    averager_cmd->add_option("--head", averager.head, "Head endpoint to register with (optional)")->group("Network");
    averager_cmd
        ->add_option("--shard", averager.shard,
                     "Run as shard owner k of K of a sharded job (with --coordinator; --listen is for the workers)")
        ->type_name("k/K")
        ->group("Network");
    averager_cmd
        ->add_option("--coordinator", averager.coordinator,
                     "A shard owner's coordinator: the endpoint of `prsgd averager --topology sharded`")
        ->type_name("ENDPOINT")
        ->group("Network");
    averager_cmd->add_option("--endpoint-file", averager.endpoint_file, endpoint_file_help)
        ->type_name("FILE")
        ->group("Network");
    add_output(*averager_cmd, averager.output, true);
    add_model(*averager_cmd, averager.model);
    add_schedule(*averager_cmd, averager.schedule);
    add_liveness(*averager_cmd, averager.liveness);
    add_security(*averager_cmd, averager.security, true, true);
    averager_cmd->footer("Example: prsgd averager --listen tcp://0.0.0.0:7500 --model fmnist-mlp --interval 8");
    add_save(*averager_cmd, averager.save);
    averager_cmd
        ->add_option("--model-size", averager.external.model_size,
                     "--model external: floats in the workers' flat model (or take them from --model-spec)")
        ->group("External model");
    averager_cmd
        ->add_option("--model-spec", averager.external.model_spec,
                     "--model external: JSON/YAML list of {name, shape} in flat order (names for --save-model)")
        ->type_name("FILE")
        ->group("External model");
    averager_cmd
        ->add_option("--init-model", averager.external.init_model,
                     "--model external: start from this safetensors file (default: the first member's model)")
        ->type_name("FILE")
        ->group("External model");
    averager_cmd
        ->add_option("--train-size", averager.external.train_size,
                     "--model external: training samples in the workers' data set (for ranges and epochs)")
        ->group("External model");
    averager_cmd
        ->add_option("--eval-timeout-ms", averager.external.eval_timeout_ms,
                     "Evaluator processes: an answer later than this leaves the round's test_acc null")
        ->capture_default_str()
        ->group("External model");
    add_operations(*averager_cmd, averager.operations);

    worker_cmd = app.add_subcommand("worker", "Run a worker: local SGD on one shard, joins an averager");
    add_averager_address(*worker_cmd, worker.averager_address);
    worker_cmd->add_option("--slowdown-ms", worker.slowdown_ms, "Artificial delay per local step in ms")
        ->capture_default_str()
        ->group("Network");
    worker_cmd
        ->add_option("--join-timeout-ms", worker.join_timeout_ms,
                     "Give up (status 1) when no averager welcomes this worker within this many ms of joining or "
                     "of losing its averager; 0 = keep trying")
        ->capture_default_str()
        ->group("Network");
    add_output(*worker_cmd, worker.output, false);
    add_model(*worker_cmd, worker.model);
    add_liveness(*worker_cmd, worker.liveness);
    add_security(*worker_cmd, worker.security, false, true);
    worker_cmd->footer(
        "Example: prsgd worker --averager tcp://127.0.0.1:7500 (the averager tells the model, data set and "
        "optimiser)");

    evaluator_cmd = app.add_subcommand(
        "evaluator", "Run an evaluator: scores x̄ on the job's test set for an averager (--evaluate-on evaluators)");
    add_averager_address(*evaluator_cmd, evaluator.averager_address);
    evaluator_cmd
        ->add_option("--join-timeout-ms", evaluator.join_timeout_ms,
                     "Give up (status 1) when no averager answers this evaluator's request for the job within this "
                     "many ms; 0 = keep asking")
        ->capture_default_str()
        ->group("Network");
    add_output(*evaluator_cmd, evaluator.output, false);
    add_model(*evaluator_cmd, evaluator.model);
    add_liveness(*evaluator_cmd, evaluator.liveness);
    add_security(*evaluator_cmd, evaluator.security, false, true);
    evaluator_cmd->footer(
        "Example: prsgd evaluator --averager tcp://127.0.0.1:7500 (the averager tells the model and data set; "
        "--data-dir and --plugin say where this host has them)");

    head_cmd = app.add_subcommand("head", "Run the head node: membership and names for a multi-host cluster");
    head_cmd->add_option("--listen", head.listen, "Endpoint to bind, e.g. tcp://0.0.0.0:7400 (required)")
        ->group("Network");
    head_cmd->add_option("--endpoint-file", head.endpoint_file, endpoint_file_help)
        ->type_name("FILE")
        ->group("Network");
    add_output(*head_cmd, head.output, false);
    add_liveness(*head_cmd, head.liveness);
    add_security(*head_cmd, head.security, true, false);

    status_cmd = app.add_subcommand("status", "Show a running job: progress, members, joiners, removals");
    add_operator(*status_cmd, status);
    status_cmd->add_flag("--json", status.json, "Print JSON (the dashboard's /api/status) instead of a table");
    watch_opt = status_cmd->add_option("--watch", status.watch_s, "Refresh every SECONDS (default 2) until Ctrl-C")
                    ->expected(0, 1)
                    ->type_name("[SECONDS]");
    status_cmd->footer("Example: prsgd status --averager tcp://10.77.0.1:7500");

    ctl_cmd = app.add_subcommand("ctl",
                                 "Steer a running job: pause, resume, remove, set-interval, set-policy, "
                                 "set-deadline, checkpoint, stop");
    add_operator(*ctl_cmd, ctl);
    ctl_cmd
        ->add_option("action", ctl.action,
                     "pause | resume | remove ID | set-interval N | set-policy fixed|per-worker|paper|"
                     "time-balanced | set-deadline none|adaptive|fixed:SECONDS | checkpoint | stop")
        ->type_name("ACTION");
    ctl_cmd->add_option("argument", ctl.arg, "The action's argument")->type_name("ARG");
    ctl_cmd->footer("Example: prsgd ctl --averager tcp://127.0.0.1:7500 set-interval 16");
    ctl.steer = true;

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

    plot_cmd = app.add_subcommand("plot", "Draw runs' metrics files with gnuplot: accuracy, loss, idle, bytes");
    plot_cmd->add_option("runs", plot.runs, "Metrics files (--metrics-jsonl), one run each")
        ->type_name("METRICS.jsonl...");
    plot_cmd->add_option("-o,--out", plot.out, "Picture to write (required)")->type_name("FILE");
    plot_cmd->add_option("--y", plot.y, "accuracy | loss | idle | bytes (idle: per worker, cumulative)")
        ->capture_default_str();
    plot_cmd->add_option("--x", plot.x, "round | rounds (trained so far, from 1) | epoch | wall")
        ->capture_default_str();
    plot_cmd->add_flag("--log-x", plot.log_x, "Logarithmic x axis (points at x <= 0 are left out)");
    plot_cmd->add_option("--dashed", plot.dashed, "Draw the run with this label dashed (repeatable)")
        ->type_name("LABEL")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    plot_cmd->add_option("--format", plot.format, "auto (svg for a .svg --out, else png) | png | svg")
        ->capture_default_str();
    plot_cmd->add_option("--label", plot.labels, "Legend title of each run, in order (repeatable)")
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    plot_cmd->add_option("--title", plot.title, "Figure title");
    plot_cmd->add_option("--width", plot.width, "Width in pixels")->capture_default_str();
    plot_cmd->add_option("--height", plot.height, "Height in pixels")->capture_default_str();
    plot_cmd->footer("Example: prsgd plot i4.jsonl i16.jsonl --label I=4 --label I=16 --x wall -o acc.png");

    models_cmd = app.add_subcommand("models", "List the registered models: parameters and the data sets they fit");
    datasets_cmd = app.add_subcommand("datasets", "List the registered data sets: sample shape and classes");
    datasets.datasets = true;
    for (auto [cmd, o] : {std::pair{models_cmd, &models}, std::pair{datasets_cmd, &datasets}}) {
      cmd->add_option("--dataset", o->dataset, "Also read this data set's shape from --data-dir");
      cmd->add_option("--data-dir", o->data_dir, "Directory of --dataset's files")->type_name("DIR");
      cmd->add_flag("--json", o->json, "Print JSON instead of a table");
      add_tool_output(*cmd, o->output);
    }
    models_cmd->footer("Example: prsgd models --plugin ./libmy_models.so");

    // Hidden: the packaging runs it to install the completion scripts.
    completion_cmd = app.add_subcommand("completion", "Print a bash or zsh completion script");
    completion_cmd->add_option("shell", completion.shell, "bash | zsh")->required();
    completion_cmd->group("");
  }
};

// The model options given on the command line or in the config file (a worker's and an evaluator's must agree
// with the job's spec; the others are taken from it).
std::vector<std::string> given_model_options(const CLI::App& sub) {
  std::vector<std::string> given;
  model_options unused;
  for (const auto& def : model_table(unused)) {
    if (sub.get_option(def.name)->count() > 0) {
      given.push_back(def.name);
    }
  }
  return given;
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

// "local, averager, ..., or datasets": the subcommands --help lists.
std::string subcommand_list(const CLI::App& app) {
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands([](const CLI::App* a) { return !a->get_group().empty(); })) {
    names.push_back(sub->get_name());
  }
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return out;
}

// "a | b | c" or "a|b|c" at the start of a help text: the values an option takes.
std::vector<std::string> help_choices(const std::string& help) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (true) {
    std::size_t end = i;
    while (end < help.size() && (std::isalnum(static_cast<unsigned char>(help[end])) != 0 || help[end] == '-')) {
      ++end;
    }
    if (end == i) {
      return {};
    }
    out.push_back(help.substr(i, end - i));
    // A choice may carry a remark in parentheses: "auto (updating line on a terminal) | plain".
    std::size_t next = end;
    if (help.compare(next, 2, " (") == 0) {
      next = help.find(')', next);
      next = next == std::string::npos ? help.size() : next + 1;
    }
    if (help.compare(next, 3, " | ") == 0) {
      i = next + 3;
    } else if (help.compare(next, 1, "|") == 0) {
      i = next + 1;
    } else {
      return out.size() >= 2 ? out : std::vector<std::string>{};
    }
  }
}

}  // namespace

std::vector<subcommand_info> subcommand_options() {
  parser p;
  std::vector<subcommand_info> out;
  for (const auto* sub : p.app.get_subcommands([](const CLI::App* a) { return !a->get_group().empty(); })) {
    std::vector<option_info> options;
    for (const auto* opt : sub->get_options([](const CLI::Option* o) { return !o->get_group().empty(); })) {
      if (opt->get_lnames().empty()) {
        continue;  // a positional argument or -h
      }
      option_info info;
      info.name = "--" + opt->get_lnames().front();
      info.takes_value = opt->get_expected_max() > 0;
      info.help = opt->get_description();
      if (info.takes_value) {
        info.choices = help_choices(opt->get_description());
        const std::string type = opt->get_type_name();
        info.path = type == "FILE" || type == "DIR" || type == "PATH" || info.name.ends_with("-dir");
      }
      options.push_back(std::move(info));
    }
    out.push_back({sub->get_name(), sub->get_description(), std::move(options)});
  }
  return out;
}

std::string program_help() {
  parser p;
  return p.app.help();
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
      return bad("prsgd: unknown subcommand '" + args[1] + "' (use " + subcommand_list(p.app) + ")");
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
    auto done = finish(*p.worker_cmd, p.worker, p.worker.output.config_file);
    if (done) {
      std::get<worker_options>(*done).given = given_model_options(*p.worker_cmd);
    }
    return done;
  }
  if (p.evaluator_cmd->parsed()) {
    auto done = finish(*p.evaluator_cmd, p.evaluator, p.evaluator.output.config_file);
    if (done) {
      std::get<evaluator_options>(*done).given = given_model_options(*p.evaluator_cmd);
    }
    return done;
  }
  if (p.head_cmd->parsed()) {
    return finish(*p.head_cmd, p.head, p.head.output.config_file);
  }
  if (p.status_cmd->parsed()) {
    if (p.watch_opt->count() > 0 && p.watch_opt->results().empty()) {
      p.status.watch_s = 2;  // --watch without SECONDS
    }
    return finish(*p.status_cmd, p.status, p.status.output.config_file);
  }
  if (p.ctl_cmd->parsed()) {
    return finish(*p.ctl_cmd, p.ctl, p.ctl.output.config_file);
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
  if (p.plot_cmd->parsed()) {
    return finish(*p.plot_cmd, p.plot, std::string{});
  }
  if (p.models_cmd->parsed()) {
    return finish(*p.models_cmd, p.models, p.models.output.config_file);
  }
  if (p.datasets_cmd->parsed()) {
    return finish(*p.datasets_cmd, p.datasets, p.datasets.output.config_file);
  }
  if (p.completion_cmd->parsed()) {
    return finish(*p.completion_cmd, p.completion, std::string{});
  }
  return bad("prsgd: a subcommand is required (" + subcommand_list(p.app) + ")");
}

}  // namespace prsgd::cli
