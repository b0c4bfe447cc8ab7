// SPDX-License-Identifier: Apache-2.0
// `prsgd evaluator`: scores x̄ on the job's test split for an averager that hands evaluation to evaluator
// processes (--evaluate-on evaluators). It learns the job like a worker (SPEC), loads the same test set the
// averager would, then says hello (EVALUATOR_HELLO) every heartbeat interval and answers every EVALUATE
// with an EVALUATION carrying x̄'s test accuracy and mean cross-entropy (actors/PROTOCOL.md, "External
// models and evaluators").
//
// Threads: the main thread says hello, reads the averager's messages and waits for SIGINT/SIGTERM (blocked
// in every thread, taken with sigtimedwait as in roles.cpp); one scoring thread runs the test set and sends
// the answers, so the hellos go on while a long evaluation runs. The transport's I/O thread only queues
// incoming messages (averager_client).
//
// Exit status: 0 when the averager ends the job (STOP), 3 on SIGINT/SIGTERM, 1 when the averager refuses
// this evaluator or the job is one it cannot score (another model, another test set, an external model),
// 2 for usage errors.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>

#include "averager_client.hpp"
#include "commands.hpp"
#include "prsgd/actors/actions.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/algorithms/model_registry.hpp"
#include "prsgd/cli/job_data.hpp"
#include "prsgd/cli/role_config.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/common/secure_random.hpp"
#include "prsgd/transport/transport.hpp"

namespace prsgd::cli {
namespace {

using namespace std::chrono_literals;

/// One EVALUATE to answer.
struct scoring_job {
  actors::incarnation_t averager_incarnation = 0;
  actors::round_t round = 0;
  std::uint64_t request = 0;
  actors::flat_buffer model;
};

/// Scores x̄ on its own thread and sends the EVALUATION itself (averager_client::send may be called from any
/// thread). Holds the only model instance; jobs are taken in arrival order.
class scorer {
 public:
  scorer(std::shared_ptr<algorithms::model> model, std::shared_ptr<const algorithms::dataset> test,
         averager_client& client, actors::incarnation_t nonce)
      : model_(std::move(model)), test_(std::move(test)), client_(client), nonce_(nonce) {
    thread_ = std::thread([this] { loop(); });
  }
  scorer(const scorer&) = delete;
  scorer& operator=(const scorer&) = delete;
  ~scorer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void add(scoring_job job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }

  /// Returns how many answers were sent.
  [[nodiscard]] std::uint64_t answered() const {
    std::lock_guard lock(mu_);
    return answered_;
  }

 private:
  void loop() {
    while (true) {
      scoring_job job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (stopping_) {
          return;
        }
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (!job.model) {
        continue;
      }
      if (auto ok = model_->set_params(*job.model); !ok) {
        // A wrong size: the averager's null accuracy for this request is the honest answer, so none is sent.
        PRSGD_LOG(error, "evaluator") << "cannot score x̄ after round " << job.round << ": " << ok.error().message();
        continue;
      }
      const auto scored = model_->evaluate(*test_);
      const auto score = actors::score_of(scored.accuracy, scored.loss);
      actors::evaluation_msg answer{0, nonce_, job.averager_incarnation, job.round, job.request, score.accuracy};
      answer.loss = score.loss;
      if (auto sent = client_.send(actors::encode(actors::any_msg{answer})); !sent) {
        PRSGD_LOG(warn, "evaluator") << "the answer for round " << job.round
                                     << " was not sent: " << sent.error().message();
        continue;
      }
      PRSGD_LOG(info, "evaluator") << "x̄ after round " << job.round << ": test accuracy " << scored.accuracy
                                   << ", test loss " << scored.loss;
      std::lock_guard lock(mu_);
      ++answered_;
    }
  }

  std::shared_ptr<algorithms::model> model_;
  std::shared_ptr<const algorithms::dataset> test_;
  averager_client& client_;
  const actors::incarnation_t nonce_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<scoring_job> jobs_;
  bool stopping_ = false;
  std::uint64_t answered_ = 0;
  std::thread thread_;
};

}  // namespace

int run_evaluator(const evaluator_options& given) {
  const sigset_t signals = block_stop_signals();
  auto learned =
      learn_job("evaluator", given.output, given.liveness, given.security, given.model, given.given,
                given.averager_address, signals, std::chrono::milliseconds{given.join_timeout_ms}, "--join-timeout-ms");
  if (const int* status = std::get_if<int>(&learned)) {
    return *status;
  }
  const joined_job& job = std::get<joined_job>(learned);
  const std::string& averager = job.averager;
  const actors::job_spec& spec = job.spec;
  const model_options& m = job.model;
  // The same parts the averager loads: its data fingerprint (with the training labels' hash) must match.
  auto data = load_job_data(m, data_need::train_size_and_test);
  if (!data) {
    std::fprintf(stderr, "prsgd evaluator: %s\n", data.error().message().c_str());
    return data_error_status(data.error());
  }
  if (const auto here = data_fingerprint(*data); here != spec.data) {
    std::fprintf(stderr,
                 "prsgd evaluator: the data here is not the job's: the job trains on %s, this host has %s "
                 "(--data-dir, --data-option)\n",
                 spec.data.c_str(), here.c_str());
    return exit_failure;
  }
  if (!data->test) {
    std::fprintf(stderr, "prsgd evaluator: data set %s has no test split here\n", data->name.c_str());
    return exit_failure;
  }
  auto fingerprint = model_fingerprint(m, *data);
  auto built = algorithms::model_registry::instance().make(m.model, data->model);
  if (!fingerprint || !built) {
    std::fprintf(stderr, "prsgd evaluator: %s\n",
                 (!fingerprint ? fingerprint.error() : built.error()).message().c_str());
    return exit_failure;
  }
  transport_config frames;
  if (auto limited = limit_frames_to_model(frames, (*built)->num_params()); !limited) {
    std::fprintf(stderr, "prsgd evaluator: %s\n", limited.error().message().c_str());
    return exit_failure;
  }
  auto connected = connect_as("evaluator", averager, given.security, frames.max_frame_bytes, given.liveness);
  if (const int* status = std::get_if<int>(&connected)) {
    return *status;
  }
  averager_client& client = *std::get<0>(connected);
  PRSGD_LOG(info, "evaluator") << "scoring " << m.model << " on the " << data->test->size() << " test samples of "
                               << data->name << " for the averager at " << averager;

  actors::incarnation_t nonce = 0;
  while (nonce == 0) {
    nonce = secure_random_u64();
  }
  actors::incarnation_t averager_incarnation = 0;
  std::optional<std::string> refusal;
  bool job_over = false;
  int signals_seen = 0;
  {
    scorer scoring{std::shared_ptr<algorithms::model>(std::move(*built)), data->test, client, nonce};
    const auto heartbeat = std::chrono::milliseconds{given.liveness.heartbeat_ms};
    auto next_hello = std::chrono::steady_clock::now();
    while (!job_over && !refusal) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_hello) {
        actors::evaluator_hello_msg hello{0, nonce, averager_incarnation, 0, *fingerprint};
        (void)client.send(actors::encode(actors::any_msg{hello}));  // repeated: a lost hello costs nothing
        next_hello = now + heartbeat;
      }
      const auto wait = std::min<std::chrono::milliseconds>(
          50ms, std::chrono::duration_cast<std::chrono::milliseconds>(next_hello - now) + 1ms);
      if (auto msg = client.receive(wait)) {
        auto decoded = actors::decode_to_evaluator(*msg);
        if (!decoded) {
          PRSGD_LOG(warn, "evaluator") << "dropped a message from the averager: " << decoded.error().message();
        } else {
          std::visit(
              [&](auto& in) {
                // For another evaluator, or from an averager incarnation that has been replaced: not ours.
                if (in.incarnation != nonce || in.averager_incarnation < averager_incarnation) {
                  return;
                }
                averager_incarnation = in.averager_incarnation;
                using T = std::decay_t<decltype(in)>;
                if constexpr (std::is_same_v<T, actors::evaluate_msg>) {
                  scoring.add(scoring_job{in.averager_incarnation, in.round, in.request, std::move(in.model)});
                } else if constexpr (std::is_same_v<T, actors::refused_msg>) {
                  refusal = in.reason;
                } else {
                  job_over = true;
                }
              },
              *decoded);
        }
      }
      if (const int sig = take_signal(signals, 0ms); sig != 0) {
        ++signals_seen;
        PRSGD_LOG(info, "evaluator") << "signal " << sig << ": leaving";
        break;
      }
    }
    if (job_over) {
      PRSGD_LOG(info, "evaluator") << "job finished after " << scoring.answered() << " evaluations";
    } else if (signals_seen > 0) {
      PRSGD_LOG(info, "evaluator") << "left after " << scoring.answered() << " evaluations";
    }
  }
  if (refusal) {
    std::fprintf(stderr, "prsgd evaluator: the averager refused this evaluator: %s\n", refusal->c_str());
    return exit_failure;
  }
  return job_over ? 0 : exit_stopped;
}

}  // namespace prsgd::cli
