# SPDX-License-Identifier: Apache-2.0
# Transport integration tests: real ZeroMQ over 127.0.0.1 with OS-chosen ports, separate peer processes,
# and (as root) network namespaces. Included by tests/integration/CMakeLists.txt.
set(prsgd_transport_it ${CMAKE_CURRENT_LIST_DIR}/transport)
prsgd_add_executable(transport_peer_helper SOURCES ${prsgd_transport_it}/peer_helper.cpp
  DEPS prsgd::transport_zmq)
prsgd_add_test(transport_zmq_integration_test
  SOURCES ${prsgd_transport_it}/zmq_transport_test.cpp
  DEPS prsgd::transport_zmq prsgd_test_support cppzmq
  LABELS integration TIMEOUT 120)
target_compile_definitions(transport_zmq_integration_test PRIVATE
  PRSGD_PEER_HELPER="$<TARGET_FILE:transport_peer_helper>")
add_dependencies(transport_zmq_integration_test transport_peer_helper)
# Multi-host over network namespaces + veth (root only; skips otherwise). RUN_SERIAL: it changes links.
prsgd_add_test(transport_netns_integration_test
  SOURCES ${prsgd_transport_it}/netns_test.cpp
  DEPS prsgd_test_support
  LABELS integration TIMEOUT 120 SERIAL)
target_compile_definitions(transport_netns_integration_test PRIVATE
  PRSGD_PEER_HELPER="$<TARGET_FILE:transport_peer_helper>")
add_dependencies(transport_netns_integration_test transport_peer_helper)
