# SPDX-License-Identifier: Apache-2.0
prsgd_add_test(actors_codec_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/codec_test.cpp DEPS prsgd::actors msgpackc-cxx)
prsgd_add_test(actors_pr_sgd_actors_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/pr_sgd_actors_test.cpp
  DEPS prsgd::actors prsgd::transport prsgd_test_support prsgd_unit_support LABELS integration TIMEOUT 180)
prsgd_add_test(actors_deterministic_job_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/deterministic_job_test.cpp
  DEPS prsgd::actors prsgd::transport prsgd_unit_support)
