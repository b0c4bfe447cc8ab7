# SPDX-License-Identifier: Apache-2.0
# Tests for data sets, sharding, averaging, outer optimiser, codecs and schedules.
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_fashion_mnist_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/fashion_mnist_test.cpp
    DEPS prsgd::algorithms ZLIB::ZLIB prsgd_test_support)
  prsgd_add_test(prsgd_averaging_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/averaging_test.cpp
    DEPS prsgd::algorithms)
  prsgd_add_test(prsgd_aggregation_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/aggregation_test.cpp
    DEPS prsgd::algorithms)
endif()
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_sharding_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/sharding_test.cpp
    DEPS prsgd::algorithms)
  prsgd_add_test(prsgd_sample_pool_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/sample_pool_test.cpp
    DEPS prsgd::algorithms)
endif()
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_wire_dtype_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/wire_dtype_test.cpp
    DEPS prsgd::algorithms)
  prsgd_add_test(prsgd_outer_optimizer_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/outer_optimizer_test.cpp
    DEPS prsgd::algorithms)
endif()
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_schedule_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/schedule_test.cpp
    DEPS prsgd::algorithms)
endif()
# The PyTorch twin's copy of the IID sampler (bench/vs_pytorch) against the order pinned above.
find_program(PRSGD_PYTHON3 python3)
if(PRSGD_PYTHON3)
  add_test(NAME prsgd_vs_pytorch_sampler_test
           COMMAND ${PRSGD_PYTHON3} ${PROJECT_SOURCE_DIR}/bench/vs_pytorch/prsgd_sampler.py)
  set_tests_properties(prsgd_vs_pytorch_sampler_test PROPERTIES LABELS "unit" TIMEOUT 60)
endif()
# The data set registry and the npy and csv data sets.
if(TARGET prsgd::algorithms)
  prsgd_add_test(prsgd_dataset_registry_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/dataset_registry_test.cpp
    DEPS prsgd::algorithms)
  prsgd_add_test(prsgd_npy_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/npy_test.cpp
    DEPS prsgd::algorithms prsgd_test_support)
  prsgd_add_test(prsgd_csv_data_test
    SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/data/csv_data_test.cpp
    DEPS prsgd::algorithms prsgd_test_support)
endif()
