// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

/// Forward declarations of prsgd::actors types.
namespace prsgd::actors {

struct join_msg;
struct welcome_msg;
struct leave_msg;
struct heartbeat_msg;
struct model_msg;
struct restart_msg;
struct removed_msg;
struct stop_msg;
enum class training_mode : std::uint8_t;

struct outbound;
struct route;
struct train_task;
struct evaluation_request;
struct submission_counters;
struct job_summary;
struct actions;

struct averager_config;
struct averager_setup;
class averager_core;
enum class averager_state : std::uint8_t;
struct submission_record;

struct worker_config;
class worker_core;
struct train_result;

struct checkpoint_state;
struct checkpoint_member;
class checkpoint_store;
class file_checkpoint_store;

struct round_metrics;
class metrics_writer;

}  // namespace prsgd::actors
