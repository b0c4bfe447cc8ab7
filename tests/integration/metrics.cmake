# SPDX-License-Identifier: Apache-2.0
# The averager's metrics outputs as a process: `--metrics-port` (Prometheus text over HTTP) scraped while a
# real job with two workers runs, and a port already in use.
if(TARGET prsgd)
  prsgd_add_process_test(metrics_prometheus_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli/prometheus_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 300)
  target_compile_definitions(metrics_prometheus_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
