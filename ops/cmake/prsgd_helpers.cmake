# SPDX-License-Identifier: Apache-2.0
# Helpers shared by every folder: one way to make a library, a test, a benchmark.

# Warnings live in an INTERFACE target linked PRIVATE, so they never reach users.
add_library(prsgd_warnings INTERFACE)
target_compile_options(prsgd_warnings INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                       $<$<BOOL:${PRSGD_WERROR}>:-Werror>)
# clang checks the lock annotations (PRSGD_GUARDED_BY, PRSGD_REQUIRES in prsgd/common/mutex.hpp).
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(prsgd_warnings INTERFACE -Wthread-safety)
endif()
# GCC 12's flow-sensitive warnings give known false positives at -O3 inside libstdc++. Two of them fire on
# every Release build, in headers we do not own, and would bury a real warning: -Wrestrict on std::string
# operator+ (GCC bug 105329) and -Wmaybe-uninitialized on moves of a std::optional. They are off for GCC;
# the clang build of the test command (-Wall -Werror, with -Wuninitialized and -Wsometimes-uninitialized)
# and its ASan + UBSan run still check prsgd's own code. The others of the family stay visible, not fatal.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(prsgd_warnings INTERFACE -Wno-restrict -Wno-maybe-uninitialized
                         -Wno-error=stringop-overflow -Wno-error=array-bounds -Wno-error=stringop-overread)
endif()
# In a unity build a source file is not the main file of its compiler run, and GCC then warns about every
# class that holds a type from that file's anonymous namespace (-Wsubobject-linkage), which is fine there.
if(PRSGD_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(prsgd_warnings INTERFACE -Wno-subobject-linkage)
endif()
# GCC 12 also warns on atomic_thread_fence (Boost.Asio) under TSan: visible but not fatal there.
if(PRSGD_SANITIZERS STREQUAL "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(prsgd_warnings INTERFACE -Wno-error=tsan)
endif()

# PRSGD_X86_LEVEL: the x86-64 instruction-set level of the numeric code (prsgd_compute_options below). Empty,
# the default, adds no -march: the compiler's own target, on Debian amd64 the x86-64 baseline that every x86-64
# CPU runs. The kernels that gain most from wide vectors (OpenBLAS, the AVX-512 convolutions and pooling, the
# AVX2 / AVX-512 clones of the im2col copies and max-pool rows) pick their instructions at run time either way.
# A level such as x86-64-v3 or native makes binaries that stop with SIGILL on CPUs without those instructions.
set(PRSGD_X86_LEVEL "" CACHE STRING
    "x86-64 level for prsgd's numeric code: '' (compiler default), x86-64, x86-64-v2, x86-64-v3, x86-64-v4, native")
set_property(CACHE PRSGD_X86_LEVEL PROPERTY STRINGS "" x86-64 x86-64-v2 x86-64-v3 x86-64-v4 native)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64|x64)$")
  set(_prsgd_x86_levels x86-64 x86-64-v2 x86-64-v3 x86-64-v4 native)
  if(PRSGD_X86_LEVEL AND NOT PRSGD_X86_LEVEL IN_LIST _prsgd_x86_levels)
    list(JOIN _prsgd_x86_levels ", " _prsgd_x86_levels)
    message(FATAL_ERROR "PRSGD_X86_LEVEL must be empty or one of ${_prsgd_x86_levels}, not '${PRSGD_X86_LEVEL}'")
  endif()
elseif(PRSGD_X86_LEVEL)
  message(FATAL_ERROR "PRSGD_X86_LEVEL='${PRSGD_X86_LEVEL}' applies to x86-64 only; this build targets "
                      "'${CMAKE_SYSTEM_PROCESSOR}'. Leave it empty.")
endif()

# PRSGD_KERNEL_O3: compile the numeric kernels with -O3 in Release and RelWithDebInfo builds. The ASan+UBSan
# and ThreadSanitizer presets turn it off, and with it the forced loop unrolls: instrumented -O3 kernels take
# minutes to compile and the tests do not need their speed.
option(PRSGD_KERNEL_O3 "Compile the numeric kernels with -O3 in optimised builds" ON)

# prsgd_compute_options(TARGET): TARGET's own sources are numeric kernels: -O3 in Release and RelWithDebInfo
# (see PRSGD_KERNEL_O3), -march=PRSGD_X86_LEVEL when that is set, and never an FMA contraction
# (-ffp-contract=off: GCC's default for -std=c++20, not clang's), so that a higher level or another compiler
# gives the same bits.
function(prsgd_compute_options target)
  if(PRSGD_KERNEL_O3)
    target_compile_options(${target} PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O3>)
  else()
    # Without the -O3 kernels, the forced loop unrolls (PRSGD_UNROLL, algorithms/src/unroll.hpp) go too.
    target_compile_definitions(${target} PRIVATE PRSGD_NO_FORCED_UNROLL)
  endif()
  target_compile_options(${target} PRIVATE -ffp-contract=off)
  if(PRSGD_X86_LEVEL)
    target_compile_options(${target} PRIVATE -march=${PRSGD_X86_LEVEL})
  endif()
endfunction()

# Sanitizers apply to our targets only (CAF_SANITIZERS style).
add_library(prsgd_sanitizers INTERFACE)
if(PRSGD_SANITIZERS)
  target_compile_options(prsgd_sanitizers INTERFACE -fsanitize=${PRSGD_SANITIZERS} -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  target_link_options(prsgd_sanitizers INTERFACE -fsanitize=${PRSGD_SANITIZERS})
endif()

set(PRSGD_EXPORTED_TARGETS "" CACHE INTERNAL "")

# PRSGD_TEST_TIME_SCALE: one factor for the tests' time limits. prsgd_add_test multiplies each ctest TIMEOUT by
# it, and tests/support (time_scale.hpp) applies it to every deadline and wall-clock bound in the tests (the
# environment variable of the same name overrides it there at run time). 1 in normal builds, so nothing is loosened there; larger
# under ThreadSanitizer, where each instrumented `prsgd` process needs ~25 s to load Fashion-MNIST.
if(PRSGD_SANITIZERS STREQUAL "thread")
  set(_prsgd_default_time_scale 6)
else()
  set(_prsgd_default_time_scale 1)
endif()
set(PRSGD_TEST_TIME_SCALE ${_prsgd_default_time_scale} CACHE STRING
    "Multiplier (whole number >= 1) for test timeouts and the integration tests' deadlines")
if(NOT PRSGD_TEST_TIME_SCALE MATCHES "^[1-9][0-9]*$")
  message(FATAL_ERROR "PRSGD_TEST_TIME_SCALE must be a whole number >= 1, not '${PRSGD_TEST_TIME_SCALE}'")
endif()

# prsgd_scaled_timeout(OUT seconds): seconds * PRSGD_TEST_TIME_SCALE, for tests added with add_test().
function(prsgd_scaled_timeout out seconds)
  math(EXPR scaled "${seconds} * ${PRSGD_TEST_TIME_SCALE}")
  set(${out} ${scaled} PARENT_SCOPE)
endfunction()

# prsgd_add_library(NAME [DIR dir] SOURCES ... PUBLIC_DEPS ... PRIVATE_DEPS ... [HEADER_ONLY])
# Creates prsgd_<NAME> with alias prsgd::<NAME>; public headers are DIR/include (installed).
function(prsgd_add_library name)
  cmake_parse_arguments(ARG "HEADER_ONLY" "DIR" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT ARG_DIR)
    set(ARG_DIR ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  set(tgt prsgd_${name})
  if(ARG_HEADER_ONLY)
    add_library(${tgt} INTERFACE)
    target_include_directories(${tgt} INTERFACE $<BUILD_INTERFACE:${ARG_DIR}/include>
                               $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${tgt} INTERFACE ${ARG_PUBLIC_DEPS})
    target_compile_features(${tgt} INTERFACE cxx_std_20)
  else()
    add_library(${tgt} ${ARG_SOURCES})
    target_include_directories(${tgt} PUBLIC $<BUILD_INTERFACE:${ARG_DIR}/include>
                               $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
                               PRIVATE ${ARG_DIR}/src)
    target_link_libraries(${tgt} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS}
                          $<BUILD_INTERFACE:prsgd_warnings> $<BUILD_INTERFACE:prsgd_sanitizers>)
    target_compile_features(${tgt} PUBLIC cxx_std_20)
    # Position-independent in static builds too, so that the archives can go into a shared object.
    set_target_properties(${tgt} PROPERTIES OUTPUT_NAME prsgd_${name} VERSION ${PROJECT_VERSION}
                          SOVERSION ${PROJECT_VERSION_MAJOR} EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)
  endif()
  set_target_properties(${tgt} PROPERTIES EXPORT_NAME ${name})
  add_library(prsgd::${name} ALIAS ${tgt})
  install(TARGETS ${tgt} EXPORT prsgdTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY ${ARG_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()

# prsgd_add_executable(NAME SOURCES ... DEPS ...): a binary of ours with warnings and sanitizers.
function(prsgd_add_executable name)
  cmake_parse_arguments(ARG "INSTALL" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} prsgd_warnings prsgd_sanitizers)
  if(ARG_INSTALL)
    install(TARGETS ${name} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endfunction()

# _prsgd_test_flags(TARGET): the compile flags every test target shares. The tests' precompiled header
# (prsgd_test_pch below) gets them too: a target can only use a PCH built with its own optimisation level,
# sanitizers and definitions.
function(_prsgd_test_flags target)
  target_link_libraries(${target} PRIVATE GTest::gtest GTest::gmock GTest::gtest_main prsgd_warnings
                        prsgd_sanitizers)
  # The code under test keeps the build type's optimisation; the test bodies (GoogleTest's macros, mostly)
  # do not need it: at -O3 they were half of the build's compile time, and -O0 takes a third less than -O1.
  # ThreadSanitizer keeps the build type's level, which its reports need to stay readable and fast enough.
  if(NOT PRSGD_SANITIZERS STREQUAL "thread" AND CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo)$")
    target_compile_options(${target} PRIVATE -O0)
  endif()
  # ccache caches compiles that use a PCH only with this sloppiness (see "Precompiled headers" in its manual).
  # It applies to the test targets alone; any other launcher ignores the variable.
  if(CMAKE_CXX_COMPILER_LAUNCHER)
    set_property(TARGET ${target} PROPERTY CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env
                 CCACHE_SLOPPINESS=pch_defines,time_macros ${CMAKE_CXX_COMPILER_LAUNCHER})
  endif()
endfunction()

# prsgd_test_pch(HEADERS ...): creates prsgd_test_pch, the precompiled header that every prsgd_add_test target
# created after it reuses: GoogleTest and the standard headers that most tests include. Parsed once instead of in
# every test source, they take a third (GCC) to two fifths (clang with ASan) off the tests' compile time.
# Test-only: never installed or exported. CMAKE_DISABLE_PRECOMPILE_HEADERS turns it off (to check that each test
# includes what it uses).
function(prsgd_test_pch)
  cmake_parse_arguments(ARG "" "" "HEADERS" ${ARGN})
  # A target needs one source for CMake to build its PCH; the object is never linked.
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/prsgd_test_pch.cpp
       CONTENT "// Generated: gives prsgd_test_pch a source, so that its precompiled header is built.\n")
  add_library(prsgd_test_pch OBJECT ${CMAKE_CURRENT_BINARY_DIR}/prsgd_test_pch.cpp)
  target_compile_features(prsgd_test_pch PRIVATE cxx_std_20)
  _prsgd_test_flags(prsgd_test_pch)
  target_precompile_headers(prsgd_test_pch PRIVATE ${ARG_HEADERS})
  # Without a timestamp in it, clang's PCH can be cached by ccache.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(prsgd_test_pch PRIVATE "SHELL:-Xclang -fno-pch-timestamp")
  endif()
endfunction()

# prsgd_add_test(NAME SOURCES ... DEPS ... [LABELS label...] [TIMEOUT s] [SERIAL])
# One GoogleTest binary; each TEST is its own CTest test with its labels (default: unit; several allowed, e.g.
# LABELS integration process) and a timeout (TIMEOUT, default 60 s, times PRSGD_TEST_TIME_SCALE). Its sources
# in tests/ use the precompiled header prsgd_test_pch; sources from other folders compile without it.
function(prsgd_add_test name)
  cmake_parse_arguments(ARG "SERIAL" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  prsgd_scaled_timeout(ARG_TIMEOUT ${ARG_TIMEOUT})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  _prsgd_test_flags(${name})
  if(TARGET prsgd_test_pch)
    target_precompile_headers(${name} REUSE_FROM prsgd_test_pch)
    set(tests_dir ${PROJECT_SOURCE_DIR}/tests)
    foreach(src IN LISTS ARG_SOURCES)
      cmake_path(ABSOLUTE_PATH src BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} NORMALIZE OUTPUT_VARIABLE abs)
      cmake_path(IS_PREFIX tests_dir "${abs}" NORMALIZE in_tests)
      if(NOT in_tests)
        set_source_files_properties(${src} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
      endif()
    endforeach()
  endif()
  set(props TIMEOUT ${ARG_TIMEOUT})
  if(ARG_SERIAL)
    list(APPEND props RUN_SERIAL TRUE)
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60 PROPERTIES ${props})
  # LABELS is a list, and gtest_discover_tests flattens list values given in PROPERTIES ("a;b" became two
  # words, the labels after the first were lost and the properties after them paired wrongly). So the labels
  # are set by a script of our own that ctest includes after the discovered tests (${name}_TESTS) are defined.
  set(labels_script ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  # Tests that start processes are the long ones: a COST makes ctest start them first when it has no timing
  # data yet (a fresh clone), so the run does not end with one core busy on a long test.
  set(cost 1)
  if("process" IN_LIST ARG_LABELS)
    set(cost 50)
  endif()
  file(WRITE ${labels_script} "if(NOT \"\${${name}_TESTS}\" STREQUAL \"\")\n"
                              "  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS [==[${ARG_LABELS}]==]"
                              " COST ${cost})\n"
                              "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_script})
endfunction()

function(prsgd_install_package)
  get_property(PRSGD_NN_BLAS GLOBAL PROPERTY PRSGD_NN_BLAS)  # set by algorithms/nn.cmake
  if(NOT PRSGD_NN_BLAS)
    set(PRSGD_NN_BLAS OFF)
  endif()
  install(EXPORT prsgdTargets NAMESPACE prsgd:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/prsgd)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/ops/cmake/prsgdConfig.cmake.in
    ${PROJECT_BINARY_DIR}/prsgdConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/prsgd)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/prsgdConfigVersion.cmake
    COMPATIBILITY SameMajorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/prsgdConfig.cmake ${PROJECT_BINARY_DIR}/prsgdConfigVersion.cmake
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/prsgd)
endfunction()
