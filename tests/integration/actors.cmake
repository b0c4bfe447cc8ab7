# SPDX-License-Identifier: Apache-2.0
# The PR-SGD actors as separate `prsgd` processes on 127.0.0.1: crashes, restarts, leaves.
if(TARGET prsgd)
  prsgd_add_process_test(actors_recovery_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/actors/recovery_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 400)
  prsgd_add_process_test(actors_coverage_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/actors/coverage_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 300)
  prsgd_add_process_test(actors_sharded_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/actors/sharded_test.cpp
                         DEPS prsgd::cli_support TIMEOUT 600)
endif()
