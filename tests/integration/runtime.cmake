# SPDX-License-Identifier: Apache-2.0
# Remote actors across OS processes (prsgd::wire over zmq on 127.0.0.1). Included from
# tests/integration/CMakeLists.txt.
if(TARGET prsgd::wire AND TARGET prsgd::transport_zmq)
  set(_wire_dir ${CMAKE_CURRENT_LIST_DIR}/runtime)
  prsgd_add_executable(prsgd_wire_test_node
    SOURCES ${_wire_dir}/wire_node_main.cpp
    DEPS prsgd::wire prsgd::transport_zmq)
  prsgd_add_test(runtime_wire_remote_test
    SOURCES ${_wire_dir}/wire_remote_test.cpp
    DEPS prsgd::wire prsgd::transport_zmq prsgd_test_support
    LABELS integration
    TIMEOUT 120)
  target_compile_definitions(runtime_wire_remote_test PRIVATE
    PRSGD_WIRE_NODE_EXE="$<TARGET_FILE:prsgd_wire_test_node>")
  add_dependencies(runtime_wire_remote_test prsgd_wire_test_node)
  # A raw cppzmq client against a node: garbage, truncated, oversized, wrong-version input.
  prsgd_add_test(runtime_wire_bad_input_test
    SOURCES ${_wire_dir}/wire_bad_input_test.cpp
    DEPS prsgd::wire prsgd::transport_zmq cppzmq
    LABELS integration
    TIMEOUT 120)
endif()
