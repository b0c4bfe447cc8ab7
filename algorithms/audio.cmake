# SPDX-License-Identifier: Apache-2.0
# Audio half of prsgd::algorithms: WAV reading, log-mel features, keyword data-set loader.
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/audio/wav.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/audio/log_mel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/src/audio/kws_data.cpp)
# The keyword model builds on the nn layers and registers itself as kws-cnn.
list(APPEND PRSGD_ALGORITHMS_SOURCES ${CMAKE_CURRENT_LIST_DIR}/src/audio/kws_model.cpp)
# The kws and wav-folder data sets of the data set registry.
list(APPEND PRSGD_ALGORITHMS_SOURCES ${CMAKE_CURRENT_LIST_DIR}/src/audio/audio_datasets.cpp)
