# SPDX-License-Identifier: Apache-2.0
# prsgd::wire: the msgpack envelope codec (envelope.hpp) and the remote-actor layer (remote.hpp,
# node.hpp) on top of prsgd::runtime and the transport interface. Included from runtime/CMakeLists.txt;
# paths are relative to this file so it can also be included from elsewhere.
set(_wire_src ${CMAKE_CURRENT_LIST_DIR}/src/wire)
# wire::node: one file per concern around the private header node_impl.hpp (which lists them).
set(_wire_node_sources ${_wire_src}/node.cpp ${_wire_src}/node_routes.cpp ${_wire_src}/node_requests.cpp
    ${_wire_src}/node_dispatch.cpp ${_wire_src}/node_monitors.cpp ${_wire_src}/node_head.cpp)
prsgd_add_library(wire
  DIR ${CMAKE_CURRENT_LIST_DIR}
  SOURCES ${_wire_src}/envelope.cpp ${_wire_src}/remote.cpp ${_wire_node_sources}
  PUBLIC_DEPS prsgd::runtime prsgd::transport msgpackc-cxx
  PRIVATE_DEPS ZLIB::ZLIB)
# The node sources share that header and the msgpack and Asio headers behind it, so they compile as one
# unity file: a clean build costs what the single node.cpp they were split from cost (compiled one by one
# they took twice the compile time).
set_target_properties(prsgd_wire PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
set_source_files_properties(${_wire_node_sources} PROPERTIES UNITY_GROUP wire_node)
