# SPDX-License-Identifier: Apache-2.0
# Tests for WAV reading, log-mel features and the keyword data-set loader.
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_wav_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/wav_test.cpp
    DEPS prsgd::algorithms)
  prsgd_add_test(prsgd_log_mel_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/log_mel_test.cpp
    DEPS prsgd::algorithms)
  # The numpy reference script lives beside the test; /usr/bin/python3 + python3-numpy come from install-deps.
  target_compile_definitions(prsgd_log_mel_test PRIVATE
    PRSGD_AUDIO_TEST_DIR="${CMAKE_CURRENT_SOURCE_DIR}/audio")
  prsgd_add_test(prsgd_kws_data_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/kws_data_test.cpp
    DEPS prsgd::algorithms)
endif()
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_kws_model_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/kws_model_test.cpp
    DEPS prsgd::algorithms)
endif()
# The wav-folder data set.
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_wav_folder_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/audio/wav_folder_test.cpp
    DEPS prsgd::algorithms)
endif()
