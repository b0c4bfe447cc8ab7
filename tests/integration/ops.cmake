# SPDX-License-Identifier: Apache-2.0
# ops/ scripts: network-namespace test hosts (root only; skipped otherwise) and the cluster script.
prsgd_add_test(ops_netns_cluster_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ops/netns_cluster_test.cpp
               LABELS integration TIMEOUT 180 SERIAL)
target_compile_definitions(ops_netns_cluster_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

prsgd_add_test(ops_cluster_script_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ops/cluster_script_test.cpp
               LABELS integration TIMEOUT 120)
target_compile_definitions(ops_cluster_script_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
