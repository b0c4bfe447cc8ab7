# SPDX-License-Identifier: Apache-2.0
# Speech data: runs ops/make-kws-data (espeak-ng + sox + python3-numpy) and loads what it writes.
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_speech_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/speech/speech_test.cpp
    DEPS prsgd::algorithms prsgd_test_support
    LABELS integration
    TIMEOUT 120)
  target_compile_definitions(prsgd_speech_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()

# The speech job: `prsgd local --model kws-cnn` with two worker processes on the tiny preset, run
# twice on one data directory (feature cache written by the first job, reused by the second). Under 60 s.
if(TARGET prsgd)
  prsgd_add_process_test(prsgd_speech_job_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/speech/speech_job_test.cpp
    TIMEOUT 90)
  target_compile_definitions(prsgd_speech_job_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()

# `PRESET=tiny examples/speech/train` as a newcomer runs it: data, feature cache, training with kws-tiny.yaml,
# and a test accuracy far above chance. About a minute on two idle cores; the timeout is for a loaded machine.
if(TARGET prsgd)
  prsgd_add_process_test(prsgd_speech_preset_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/speech/speech_preset_test.cpp
    TIMEOUT 600)
  target_compile_definitions(prsgd_speech_preset_test PRIVATE PRSGD_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
