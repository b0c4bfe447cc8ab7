# SPDX-License-Identifier: Apache-2.0
# Data sets, sharding, averaging kernels, outer optimiser, wire codecs and schedules.
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/fashion_mnist.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/averaging.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/aggregation.cpp)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/sharding.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/sample_pool.cpp)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/wire_dtype.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/outer_optimizer.cpp)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/schedule.cpp)
# The data set registry (--dataset) and its built-in file formats.
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/dataset_registry.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/dataset_files.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/builtin_datasets.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/npy.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/csv_data.cpp)
