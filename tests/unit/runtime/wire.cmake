# SPDX-License-Identifier: Apache-2.0
# Unit tests of prsgd::wire; included from tests/unit/runtime/CMakeLists.txt.
prsgd_add_test(runtime_wire_envelope_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/wire/envelope_test.cpp
  DEPS prsgd::wire msgpackc-cxx)
prsgd_add_test(runtime_wire_node_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/wire/node_test.cpp
  DEPS prsgd::wire)
