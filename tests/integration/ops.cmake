# SPDX-License-Identifier: Apache-2.0
# ops/ scripts: network-namespace test hosts (root only; skipped otherwise) and the cluster script.
prsgd_add_test(ops_netns_cluster_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ops/netns_cluster_test.cpp
               DEPS prsgd_test_support LABELS integration TIMEOUT 180 SERIAL)
target_compile_definitions(ops_netns_cluster_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

prsgd_add_test(ops_cluster_script_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ops/cluster_script_test.cpp
               DEPS prsgd_test_support LABELS integration TIMEOUT 120)
target_compile_definitions(ops_cluster_script_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# ops/paper-experiment --quick: table with a row per configuration, and the plots. Runs the script
# against the Release binary only: under sanitizers the same few rounds take several times longer, and prsgd
# itself is covered there by the cli tests. Skipped (exit 77) when gnuplot is missing.
if(TARGET prsgd AND NOT PRSGD_SANITIZERS)
  add_test(NAME ops_paper_experiment_quick
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/ops/paper_experiment_quick_test.sh $<TARGET_FILE:prsgd>
                   ${PROJECT_SOURCE_DIR})
  # About 50 s on an idle 2-core machine; serial and a generous timeout because on a loaded one (load average 30) it took 5.5 minutes.
  prsgd_scaled_timeout(timeout 600)
  set_tests_properties(ops_paper_experiment_quick PROPERTIES LABELS integration TIMEOUT ${timeout} RUN_SERIAL TRUE
                       SKIP_RETURN_CODE 77)
endif()

# Heartbeats behind a model on a tc-tbf-limited netns link (docs/decisions/0024): the member is kept. Root
# only (skipped otherwise); serial because it creates network namespaces. Release only: its 80 s go into
# moving models over a 2 Mbit/s link, and under sanitizers the cores' unit tests of announced transfers
# (averager_core_test, worker_core_test) cover the code it exercises.
if(TARGET prsgd AND NOT PRSGD_SANITIZERS)
  add_test(NAME ops_slow_link_heartbeat
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/ops/slow_link_heartbeat_test.sh $<TARGET_FILE:prsgd>
                   ${PROJECT_SOURCE_DIR} ${PRSGD_TEST_TIME_SCALE})
  prsgd_scaled_timeout(timeout 600)
  set_tests_properties(ops_slow_link_heartbeat PROPERTIES LABELS integration TIMEOUT ${timeout} RUN_SERIAL TRUE
                       SKIP_RETURN_CODE 77)
endif()

# --upload-buffer-kib on three network-namespace hosts: the kernel's socket table shows the cap on each
# worker's connection to the owner on the other host and nowhere else (about 2 s). Root only (skipped
# otherwise); serial because it creates network namespaces. Release only: under sanitizers the transport's
# own test of the option and the ring gather's test of attaching to the owners cover its code.
if(TARGET prsgd AND NOT PRSGD_SANITIZERS)
  add_test(NAME ops_upload_buffer COMMAND ${CMAKE_CURRENT_LIST_DIR}/ops/upload_buffer_test.sh $<TARGET_FILE:prsgd>
                                          ${PROJECT_SOURCE_DIR} ${PRSGD_TEST_TIME_SCALE})
  prsgd_scaled_timeout(timeout 300)
  set_tests_properties(ops_upload_buffer PROPERTIES LABELS integration TIMEOUT ${timeout} RUN_SERIAL TRUE
                       SKIP_RETURN_CODE 77)
endif()

# PRSGD_WIRE_TRACE end to end: a sharded `prsgd local` job of 6 rounds writes one trace from every process,
# and bench/vs_gloo/timeline reads its rounds back in order (about 2 s).
if(TARGET prsgd)
  add_test(NAME ops_wire_trace_timeline
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/ops/wire_trace_timeline_test.sh $<TARGET_FILE:prsgd> ${PROJECT_SOURCE_DIR})
  prsgd_scaled_timeout(timeout 120)
  set_tests_properties(ops_wire_trace_timeline PROPERTIES LABELS integration TIMEOUT ${timeout})
endif()

# bench/links.counters() on two netns hosts: 2 MB over a 100 Mbit/s link and 1 MB over loopback show in its
# counts. Root only (skipped otherwise); serial because it creates network namespaces (about 2 s).
if(EXISTS /usr/bin/python3)
  add_test(NAME ops_links_counters COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/ops/links_counters_test.py
                                           ${PROJECT_SOURCE_DIR})
  set_tests_properties(ops_links_counters PROPERTIES LABELS integration TIMEOUT 120 RUN_SERIAL TRUE
                       SKIP_RETURN_CODE 77)
endif()

# bench/vs_gloo/cpu_split on a busy loop: lines with their times, a row per step, the command's status (2 s).
add_test(NAME ops_cpu_split COMMAND ${CMAKE_CURRENT_LIST_DIR}/ops/cpu_split_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(ops_cpu_split PROPERTIES LABELS integration TIMEOUT 60)

# bench/vs_gloo/ceiling on made-up results: training alone plus the link time of the bytes, and the ratios (1 s).
if(EXISTS /usr/bin/python3)
  add_test(NAME ops_vs_gloo_ceiling COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/ops/ceiling_test.py
                                            ${PROJECT_SOURCE_DIR})
  set_tests_properties(ops_vs_gloo_ceiling PROPERTIES LABELS integration TIMEOUT 60)
endif()

# The ring gather end to end: sharded `prsgd local` jobs with --gather direct and ring train the same model
# byte for byte (f32 and bf16), and the wire trace shows each worker fed by one owner; with CURVE and allow
# lists the owners need the server key on theirs, or each ends with one line (about 20 s).
if(TARGET prsgd)
  add_test(NAME ops_ring_gather COMMAND ${CMAKE_CURRENT_LIST_DIR}/ops/ring_gather_test.sh $<TARGET_FILE:prsgd>
                                        ${PROJECT_SOURCE_DIR} ${PRSGD_TEST_TIME_SCALE})
  prsgd_scaled_timeout(timeout 240)
  set_tests_properties(ops_ring_gather PROPERTIES LABELS integration TIMEOUT ${timeout})
endif()

# A fresh job's first model: in a star `prsgd local` job every worker's first RESTART only confirms the x̄_0
# the worker built itself, and the later ones carry x̄ (about 3 s).
if(TARGET prsgd)
  add_test(NAME ops_first_model
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/ops/first_model_test.sh $<TARGET_FILE:prsgd> ${PROJECT_SOURCE_DIR})
  prsgd_scaled_timeout(timeout 120)
  set_tests_properties(ops_first_model PROPERTIES LABELS integration TIMEOUT ${timeout})
endif()
