// SPDX-License-Identifier: Apache-2.0
// prsgd_sim: one simulated PR-SGD job (the real averager and worker cores, a network model, no sockets);
// prints its measurements as one JSON line. bench/sim/run sweeps configurations with it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "prsgd/common/log.hpp"
#include "simulator.hpp"

namespace {

constexpr const char* usage_text =
    "usage: prsgd_sim [options]      (one JSON line of results on stdout)\n"
    "  --workers N            workers at the start (default 8)\n"
    "  --max-workers N        data shards, the most members at once (default --workers)\n"
    "  --rounds R             trained rounds (default 100)\n"
    "  --interval I           local steps per round, or their mean with time-balanced (default 16)\n"
    "  --interval-policy P    fixed | time-balanced (default fixed)\n"
    "  --deadline D           none | fixed | adaptive (default none)\n"
    "  --deadline-s S         the fixed deadline after a round starts (default 10)\n"
    "  --quorum Q             submissions a deadline needs (default 1)\n"
    "  --model-floats P       model size the links carry (default 535818, fmnist-mlp)\n"
    "  --averager-mbit X      averager link, Mbit/s each direction (default 100)\n"
    "  --worker-mbit X        every worker's link, Mbit/s each direction (default 100)\n"
    "  --latency-ms X         one-way latency (default 0.2)\n"
    "  --step-ms X            seconds per local step of the median worker, in ms (default 10)\n"
    "  --speed-spread X       worker speeds log-uniform in [1/X, X] x median (default 1)\n"
    "  --straggler-prob X     chance a task is slowed (default 0)\n"
    "  --straggler-factor X   its slow-down (default 4)\n"
    "  --crash-per-hour X     silent crashes per worker and simulated hour (default 0)\n"
    "  --leave-per-hour X     LEAVEs per worker and simulated hour (default 0)\n"
    "  --join-per-hour X      new workers per simulated hour (default 0)\n"
    "  --heartbeat-s X        heartbeat interval (default 1); timeout is 5x\n"
    "  --seed S               (default 1)\n";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "prsgd_sim: %s\n%s", msg.c_str(), usage_text);
  std::exit(2);
}

double number(std::string_view name, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0') {
    usage_error(std::string(name) + " needs a number (got '" + text + "')");
  }
  return v;
}

std::uint64_t count(std::string_view name, const char* text) {
  const double v = number(name, text);
  if (v < 0 || v != static_cast<double>(static_cast<std::uint64_t>(v))) {
    usage_error(std::string(name) + " needs a non-negative integer (got '" + text + "')");
  }
  return static_cast<std::uint64_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  prsgd::log::set_level(prsgd::log::level::error);
  prsgd::sim::sim_config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(usage_text, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      usage_error("unknown option or missing value: " + std::string(a));
    }
    const char* v = argv[++i];
    if (a == "--workers") {
      c.workers = count(a, v);
    } else if (a == "--max-workers") {
      c.max_workers = count(a, v);
    } else if (a == "--rounds") {
      c.rounds = count(a, v);
    } else if (a == "--interval") {
      c.interval = count(a, v);
    } else if (a == "--interval-policy") {
      if (std::strcmp(v, "fixed") == 0) {
        c.intervals = prsgd::algorithms::interval_kind::fixed;
      } else if (std::strcmp(v, "time-balanced") == 0) {
        c.intervals = prsgd::algorithms::interval_kind::time_balanced;
      } else {
        usage_error("--interval-policy must be fixed or time-balanced (got '" + std::string(v) + "')");
      }
    } else if (a == "--deadline") {
      auto d = prsgd::actors::parse_deadline_policy(v);
      if (!d) {
        usage_error("--deadline must be none, fixed or adaptive (got '" + std::string(v) + "')");
      }
      c.deadline = *d;
    } else if (a == "--deadline-s") {
      c.deadline_s = number(a, v);
    } else if (a == "--quorum") {
      c.quorum = count(a, v);
    } else if (a == "--model-floats") {
      c.model_floats = number(a, v);
    } else if (a == "--averager-mbit") {
      c.averager_rate = number(a, v) * 1e6 / 8;
    } else if (a == "--worker-mbit") {
      c.worker_rate = number(a, v) * 1e6 / 8;
    } else if (a == "--latency-ms") {
      c.latency_s = number(a, v) / 1e3;
    } else if (a == "--step-ms") {
      c.step_s = number(a, v) / 1e3;
    } else if (a == "--speed-spread") {
      c.speed_spread = number(a, v);
    } else if (a == "--straggler-prob") {
      c.straggler_prob = number(a, v);
    } else if (a == "--straggler-factor") {
      c.straggler_factor = number(a, v);
    } else if (a == "--crash-per-hour") {
      c.crash_per_hour = number(a, v);
    } else if (a == "--leave-per-hour") {
      c.leave_per_hour = number(a, v);
    } else if (a == "--join-per-hour") {
      c.join_per_hour = number(a, v);
    } else if (a == "--heartbeat-s") {
      c.heartbeat_s = number(a, v);
      c.heartbeat_timeout_s = 5 * c.heartbeat_s;
    } else if (a == "--seed") {
      c.seed = count(a, v);
    } else {
      usage_error("unknown option " + std::string(a));
    }
  }
  auto r = prsgd::sim::simulate(c);
  if (!r) {
    usage_error(r.error().context);
  }
  std::printf("%s\n", prsgd::sim::to_json(*r).c_str());
  return 0;
}
