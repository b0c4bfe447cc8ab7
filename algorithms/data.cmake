# SPDX-License-Identifier: Apache-2.0
# Data sets, sharding, averaging kernels, outer optimiser, wire codecs and schedules.
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/fashion_mnist.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/averaging.cpp)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/sharding.cpp)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/codec.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/outer_optimizer.cpp)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/schedule.cpp)
