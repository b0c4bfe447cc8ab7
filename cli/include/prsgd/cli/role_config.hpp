// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <vector>

#include "prsgd/actors/averager_actor.hpp"
#include "prsgd/actors/worker_actor.hpp"
#include "prsgd/cli/job_data.hpp"
#include "prsgd/cli/options.hpp"
#include "prsgd/common/expected.hpp"
#include "prsgd/transport/transport.hpp"

/// The one place where parsed options become the configuration of a role: pure functions, no I/O, no
/// clock (the caller passes what it read from the data and the time), so each mapping has unit tests.
/// Adding an option of a role touches the option table (options.cpp), the role's function here and
/// docs/cli.md.
namespace prsgd::cli {

/// Returns the averager actor's configuration (everything but the callbacks `on_round` and `on_done`, which
/// belong to the process that runs it). `data` is what load_job_data(o.model, train_size_and_test) returned,
/// `plan` what plan_job(o.schedule, ...) returned, `incarnation` the averager incarnation to use without a
/// checkpoint directory (milliseconds since the epoch). Returns invalid_argument for an enum value the
/// algorithms' parsers refuse (validate(averager_options) has already refused them on the command line).
[[nodiscard]] expected<actors::averager_actor_config> averager_config_from(const averager_options& o,
                                                                           const job_data& data, const job_length& plan,
                                                                           actors::incarnation_t incarnation);

/// Returns the worker actor's configuration (everything but `on_finished`). `data` is what
/// load_job_data(o.model, train) returned; `incarnation` the worker's JOIN nonce (secure_random_u64). The
/// member id and data shard come from the averager.
[[nodiscard]] expected<actors::worker_actor_config> worker_config_from(const worker_options& o, const job_data& data,
                                                                       actors::incarnation_t incarnation);

/// Returns the job spec the averager announces (actors::job_spec): the model and data fingerprints of `m`
/// on `data`, and the options a worker needs to train the same way (model and data set names, data
/// options, batch, seed, step size, momentum, sharding). --data-dir is not part of it: every host has its
/// own. Errors as model_fingerprint, and invalid_argument when a name or data option is too long for the
/// wire (actors::check_spec_fits).
[[nodiscard]] expected<actors::job_spec> job_spec_from(const model_options& m, const job_data& data);

/// Returns the model options a worker trains the job `spec` with: the spec's values, and `o.data_dir`. Every
/// option named in `given` (long names, e.g. "--batch": what the user gave the worker on the command line or
/// in --config) must agree with the spec; the first that does not gives invalid_argument with one line
/// naming it, e.g. "batch mismatch: --batch 32 was given, the job at tcp://h:7500 uses 64". `averager` is
/// the endpoint named in that line.
[[nodiscard]] expected<model_options> adopt_job_spec(const actors::job_spec& spec, const model_options& o,
                                                     const std::vector<std::string>& given,
                                                     const std::string& averager);

/// Derives the transport's frame limit from the model (`num_params` floats): the largest frame prsgd sends
/// is the model in float32, so a much larger frame can only come from a broken or hostile peer and libzmq
/// refuses it before storing it (1 MiB of room covers the headers). Fails with too_large, before anything
/// runs, when the model cannot travel at all: above the training codec's limit
/// (actors::codec_limits::max_model_floats) or above 16 GiB per frame.
[[nodiscard]] expected<void> limit_frames_to_model(transport_config& cfg, std::size_t num_params);

}  // namespace prsgd::cli
