// SPDX-License-Identifier: Apache-2.0
#include "averager_client.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <utility>

#include "commands.hpp"
#include "external_model.hpp"
#include "head_role.hpp"
#include "prsgd/actors/codec.hpp"
#include "prsgd/cli/job_data.hpp"
#include "prsgd/cli/key_files.hpp"
#include "prsgd/cli/role_config.hpp"
#include "prsgd/common/log.hpp"
#include "prsgd/common/secure_random.hpp"
#include "prsgd/transport/zmq_transport.hpp"

namespace prsgd::cli {

using namespace std::chrono_literals;

expected<std::unique_ptr<averager_client>> averager_client::connect(const std::string& endpoint,
                                                                    const security_options& security,
                                                                    std::size_t max_frame_bytes,
                                                                    const std::optional<liveness_options>& liveness) {
  auto c = std::unique_ptr<averager_client>(new averager_client());
  transport_config cfg;
  cfg.node_name = "client-" + std::to_string(secure_random_u64() % 100000);
  cfg.max_frame_bytes = max_frame_bytes;
  if (liveness) {
    cfg.heartbeat_interval = std::chrono::milliseconds{liveness->heartbeat_ms};
    cfg.heartbeat_timeout = std::chrono::milliseconds{liveness->heartbeat_timeout_ms};
  }
  auto curve = load_curve(security);
  PRSGD_TRY(curve);
  cfg.curve = std::move(curve->own);
  transport_handlers h;
  auto* self = c.get();
  h.on_message = [self](peer_id, multipart msg) { self->take(std::move(msg)); };
  auto link = make_transport("zmq", cfg, std::move(h));
  PRSGD_TRY(link);
  c->link_ = std::move(*link);
  connect_options opts;
  opts.server_public_key = curve->server_public_key;
  auto peer = c->link_->connect(endpoint, opts);
  PRSGD_TRY(peer);
  c->peer_ = *peer;
  c->endpoint_ = endpoint;
  return c;
}

averager_client::~averager_client() {
  if (link_) {
    link_->stop();
  }
}

expected<actors::to_operator> averager_client::ask(const actors::any_msg& request, std::uint64_t nonce, bool repeat,
                                                   std::chrono::milliseconds timeout,
                                                   std::chrono::milliseconds repeat_every) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto sent = link_->send(peer_, actors::encode(request));
  PRSGD_TRY(sent);
  auto next_send = std::chrono::steady_clock::now() + repeat_every;
  std::unique_lock lock(mu_);
  while (true) {
    while (!inbox_.empty()) {
      auto msg = std::move(inbox_.front());
      inbox_.pop_front();
      auto decoded = actors::decode_to_operator(msg);
      if (!decoded) {
        continue;
      }
      const auto reply_nonce = std::visit([](const auto& m) { return m.incarnation; }, *decoded);
      if (reply_nonce == nonce) {
        return std::move(*decoded);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) {
      return fail(errc::timeout,
                  "no answer from the averager at " + endpoint_ + " within " + std::to_string(timeout.count()) + " ms");
    }
    if (repeat && now >= next_send) {
      lock.unlock();
      (void)link_->send(peer_, actors::encode(request));
      lock.lock();
      next_send = now + repeat_every;
    }
    cv_.wait_until(lock, std::min(until, repeat ? next_send : until));
  }
}

expected<void> averager_client::send(const multipart& msg) { return link_->send(peer_, msg); }

std::optional<multipart> averager_client::receive(std::chrono::milliseconds wait) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, wait, [this] { return !inbox_.empty(); })) {
    return std::nullopt;
  }
  auto msg = std::move(inbox_.front());
  inbox_.pop_front();
  return msg;
}

void averager_client::take(multipart msg) {
  std::lock_guard lock(mu_);
  inbox_.push_back(std::move(msg));
  cv_.notify_all();
}

std::variant<std::unique_ptr<averager_client>, int> connect_as(const char* role, const std::string& endpoint,
                                                               const security_options& security,
                                                               std::size_t max_frame_bytes,
                                                               const std::optional<liveness_options>& liveness) {
  auto client = averager_client::connect(endpoint, security, max_frame_bytes, liveness);
  if (!client) {
    std::fprintf(stderr, "prsgd %s: cannot connect to %s: %s\n", role, endpoint.c_str(),
                 client.error().message().c_str());
    return client.error().code == errc::not_found || client.error().code == errc::decode_failed ? exit_usage
                                                                                                : exit_failure;
  }
  return std::move(*client);
}

std::variant<actors::spec_reply_msg, int> ask_job_spec(averager_client& client, const char* role,
                                                       const liveness_options& liveness, const sigset_t& signals,
                                                       std::chrono::milliseconds give_up_after,
                                                       const char* limit_option) {
  const auto started = std::chrono::steady_clock::now();
  actors::spec_request_msg request;
  request.incarnation = secure_random_u64();
  const auto repeat = std::max<std::chrono::milliseconds>(std::chrono::milliseconds{liveness.heartbeat_ms}, 200ms);
  bool waiting_said = false;
  while (true) {
    auto reply = client.ask(actors::any_msg{request}, request.incarnation, true, 1s, repeat);
    if (reply) {
      if (const auto* spec = std::get_if<actors::spec_reply_msg>(&*reply)) {
        return *spec;
      }
      std::fprintf(stderr, "prsgd %s: the averager at %s answered SPEC with something else\n", role,
                   client.endpoint().c_str());
      return exit_failure;
    }
    if (reply.error().code != errc::timeout) {
      std::fprintf(stderr, "prsgd %s: %s\n", role, reply.error().message().c_str());
      return exit_failure;
    }
    if (!waiting_said) {
      PRSGD_LOG(info, role) << "waiting for the averager at " << client.endpoint() << " to describe the job";
      waiting_said = true;
    }
    if (const int sig = take_signal(signals, 0ms); sig != 0) {
      PRSGD_LOG(info, role) << "signal " << sig << ": stopping before joining";
      return exit_stopped;
    }
    if (give_up_after.count() > 0 && std::chrono::steady_clock::now() - started >= give_up_after) {
      std::fprintf(stderr, "prsgd %s: no averager answered at %s within %g s (%s); giving up\n", role,
                   client.endpoint().c_str(), std::chrono::duration<double>(give_up_after).count(), limit_option);
      return exit_failure;
    }
  }
}

std::variant<joined_job, int> learn_job(const char* role, const output_options& output,
                                        const liveness_options& liveness, const security_options& security,
                                        const model_options& model, const std::vector<std::string>& given,
                                        const averager_address_options& where, const sigset_t& signals,
                                        std::chrono::milliseconds give_up_after, const char* limit_option) {
  const auto is_given = [&](std::string_view name) {
    return std::find(given.begin(), given.end(), name) != given.end();
  };
  // A model or data set named on the command line is checked now (a usage error); the job's are checked
  // once the averager has named them.
  if (auto p = prepare_process(output, is_given("--model") ? model.model : std::string{},
                               is_given("--dataset") && model.dataset != "auto" ? model.dataset : std::string{});
      !p) {
    std::fprintf(stderr, "prsgd %s: %s\n", role, p.error().message().c_str());
    return exit_usage;
  }
  joined_job job;
  job.averager = where.averager;
  if (job.averager.empty()) {
    auto found = lookup_averager(where.head, liveness, security, std::chrono::milliseconds{where.head_timeout_ms});
    if (!found) {
      std::fprintf(stderr, "prsgd %s: %s\n", role, found.error().message().c_str());
      return exit_failure;
    }
    job.averager = *found;
    PRSGD_LOG(info, role) << "head " << where.head << " says the averager is at " << job.averager;
  }
  {
    auto client = connect_as(role, job.averager, security);
    if (const int* status = std::get_if<int>(&client)) {
      return *status;
    }
    auto reply = ask_job_spec(*std::get<0>(client), role, liveness, signals, give_up_after, limit_option);
    if (const int* status = std::get_if<int>(&reply)) {
      return *status;
    }
    job.spec = std::get<actors::spec_reply_msg>(reply).spec;
  }
  if (job.spec.model_name.empty() || job.spec.model_name == external_model_name) {
    std::fprintf(stderr,
                 "prsgd %s: the job at %s trains an external model whose network only its Python workers and "
                 "evaluators know (prsgd.torch, prsgd.Evaluator)\n",
                 role, job.averager.c_str());
    return exit_failure;
  }
  // The averager owns the job: the options given here must agree with it.
  auto adopted = adopt_job_spec(job.spec, model, given, job.averager);
  if (!adopted) {
    std::fprintf(stderr, "prsgd %s: %s\n", role, adopted.error().context.c_str());
    return exit_failure;
  }
  if (auto known = check_job_known(*adopted, role); !known) {
    std::fprintf(stderr, "prsgd %s: %s\n", role, known.error().context.c_str());
    return exit_failure;
  }
  job.model = std::move(*adopted);
  return job;
}

}  // namespace prsgd::cli
