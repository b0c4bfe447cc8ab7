/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prsgd plugin ABI (C). A plugin is a shared library passed to `prsgd ... --plugin PATH`.
 *
 * It must export exactly two symbols:
 *
 *   const uint32_t prsgd_plugin_abi_version;       -- write PRSGD_PLUGIN_DECLARE_ABI(); once
 *   int prsgd_plugin_init(const prsgd_plugin_host* host);
 *
 * The host dlopen()s the library (RTLD_NOW | RTLD_LOCAL), reads prsgd_plugin_abi_version and refuses
 * the plugin unless it equals the host's PRSGD_PLUGIN_ABI_VERSION. Then it calls prsgd_plugin_init()
 * once, on the main thread, before any actor starts. Return 0 on success; any other value refuses the
 * plugin (call host->set_error() first to say why). A loaded plugin is never unloaded, so code and
 * data it registers stay valid for the life of the process.
 *
 * Models: a C++ plugin registers its models in the host's model registry, which it gets from
 * host->model_registry (a `prsgd::algorithms::model_registry*`, NULL if the host has none), and
 * tells the host what it added with host->announce(host->context, "model", "my-model") so that the
 * host can list it. See docs/cli.md for a complete example.
 *
 * Data sets: likewise, a plugin registers loaders in host->dataset_registry (a
 * `prsgd::algorithms::dataset_registry*`, NULL if the host has none) and announces them as kind
 * "dataset"; `--dataset NAME` then loads through them. That field was appended after the first
 * release of ABI version 1: read it only when host->struct_size covers it (see PRSGD_PLUGIN_HOST_HAS).
 *
 * Compatibility: the ABI version changes whenever this struct or the entry point change in an
 * incompatible way. Fields are only ever appended; host->struct_size says how many exist.
 */
#ifndef PRSGD_CLI_PLUGIN_H
#define PRSGD_CLI_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The plugin ABI version this header describes. */
#define PRSGD_PLUGIN_ABI_VERSION 1u

/** Log levels for prsgd_plugin_host.log. */
enum prsgd_plugin_log_level {
  PRSGD_PLUGIN_LOG_DEBUG = 1,
  PRSGD_PLUGIN_LOG_INFO = 2,
  PRSGD_PLUGIN_LOG_WARN = 3,
  PRSGD_PLUGIN_LOG_ERROR = 4
};

/** What the host hands to prsgd_plugin_init(). Valid only during that call (copy what you need). */
typedef struct prsgd_plugin_host {
  /** The host's PRSGD_PLUGIN_ABI_VERSION. */
  uint32_t abi_version;
  /** sizeof(prsgd_plugin_host) in the host; fields beyond it do not exist. */
  uint32_t struct_size;
  /** The host's prsgd version, e.g. "0.1.0". */
  const char* host_version;
  /** Opaque; pass it back as the first argument of every callback. */
  void* context;
  /** Writes one log line through the host's logger. */
  void (*log)(void* context, int level, const char* message);
  /** Sets the message the host reports if prsgd_plugin_init() returns non-zero. */
  void (*set_error)(void* context, const char* message);
  /** Records that the plugin provides `name` of `kind` ("model", "dataset", ...). Returns 0, or
   *  non-zero when the host refuses it (empty or duplicate name). */
  int (*announce)(void* context, const char* kind, const char* name);
  /** The host's `prsgd::algorithms::model_registry*`, or NULL when the host has none. */
  void* model_registry;
  /** The host's `prsgd::algorithms::dataset_registry*`, or NULL when the host has none. Appended to ABI
   *  version 1: older hosts lack it, so check PRSGD_PLUGIN_HOST_HAS(host, dataset_registry) first. */
  void* dataset_registry;
} prsgd_plugin_host;

/** True when the host struct `host` points to has the field `field` (its struct_size covers it). */
#define PRSGD_PLUGIN_HOST_HAS(host, field) \
  ((host)->struct_size >= offsetof(prsgd_plugin_host, field) + sizeof((host)->field))

/** Signature of the entry point. */
typedef int (*prsgd_plugin_init_fn)(const prsgd_plugin_host* host);

#if defined(__GNUC__)
#define PRSGD_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define PRSGD_PLUGIN_EXPORT
#endif

#ifdef __cplusplus
}
#define PRSGD_PLUGIN_EXTERN_C extern "C"
#else
#define PRSGD_PLUGIN_EXTERN_C extern
#endif

/** Defines the exported ABI version symbol; write it once in one source file of the plugin. */
#define PRSGD_PLUGIN_DECLARE_ABI() \
  PRSGD_PLUGIN_EXTERN_C PRSGD_PLUGIN_EXPORT const uint32_t prsgd_plugin_abi_version = PRSGD_PLUGIN_ABI_VERSION

#endif /* PRSGD_CLI_PLUGIN_H */
