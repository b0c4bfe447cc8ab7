# SPDX-License-Identifier: Apache-2.0
# Data sets, sharding, averaging kernels, outer optimiser, wire codecs and schedules.
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/fashion_mnist.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/averaging.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/aggregation.cpp)
# The robust aggregation's register kernels (src/data/aggregation/kernels.hpp): each file builds one family, or one
# slice of the unequal-weight trimmed mean's patterns, in one vector width. As one file they were the longest
# compile of the project, alone on the critical path; as their own translation units, kept out of unity files,
# they compile in parallel.
set(_aggregation_kernel_sources "")
foreach(_family register register_window weighted weighted_window quantized_1_10 quantized_11_13 quantized_14_15
                quantized_16)
  foreach(_width narrow wide)
    list(APPEND _aggregation_kernel_sources ${CMAKE_CURRENT_SOURCE_DIR}/src/data/aggregation/${_family}_${_width}.cpp)
  endforeach()
endforeach()
set_source_files_properties(${_aggregation_kernel_sources} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
list(APPEND PRSGD_ALGORITHMS_SOURCES ${_aggregation_kernel_sources})
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/sharding.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/sample_pool.cpp)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/wire_dtype.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/outer_optimizer.cpp)
# The binary16 conversions use float additions (which never trap: nothing in prsgd enables FP traps); without
# -fno-trapping-math GCC keeps them behind branches and the f16 loops do not vectorise. Compiled on its own
# so the flag stays in this file.
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/src/data/wire_dtype.cpp PROPERTIES
  COMPILE_OPTIONS -fno-trapping-math SKIP_UNITY_BUILD_INCLUSION ON)
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/schedule.cpp)
# The data set registry (--dataset) and its built-in file formats.
list(APPEND PRSGD_ALGORITHMS_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/dataset_registry.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/dataset_files.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/builtin_datasets.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/npy.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/data/csv_data.cpp)
