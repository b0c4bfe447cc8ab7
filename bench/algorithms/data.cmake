# SPDX-License-Identifier: Apache-2.0
# Benchmarks for averaging kernels; bench/algorithms/data/HISTORY.md has the figures.
if(TARGET benchmark::benchmark)
  prsgd_add_executable(prsgd_averaging_bench
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/averaging_bench.cpp
    DEPS prsgd::algorithms benchmark::benchmark)
  prsgd_compute_options(prsgd_averaging_bench)
endif()
# Robust aggregation (trimmed mean, median, norm clip, the screen) against the mean.
if(TARGET benchmark::benchmark)
  prsgd_add_executable(prsgd_aggregation_bench
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/aggregation_bench.cpp
    DEPS prsgd::algorithms benchmark::benchmark)
  prsgd_compute_options(prsgd_aggregation_bench)
endif()
# What a lossy wire dtype costs per round: encode, decode, quantize, error feedback, against memcpy.
if(TARGET benchmark::benchmark)
  prsgd_add_executable(prsgd_wire_dtype_bench
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/wire_dtype_bench.cpp
    DEPS prsgd::algorithms benchmark::benchmark)
  prsgd_compute_options(prsgd_wire_dtype_bench)
endif()
