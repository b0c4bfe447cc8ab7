# SPDX-License-Identifier: Apache-2.0
# prsgd::wire: the msgpack envelope codec (envelope.hpp) and the remote-actor layer (remote.hpp,
# node.hpp) on top of prsgd::runtime and the transport interface. Included from runtime/CMakeLists.txt;
# paths are relative to this file so it can also be included from elsewhere.
prsgd_add_library(wire
  DIR ${CMAKE_CURRENT_LIST_DIR}
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/src/wire/envelope.cpp
          ${CMAKE_CURRENT_LIST_DIR}/src/wire/remote.cpp
          ${CMAKE_CURRENT_LIST_DIR}/src/wire/node.cpp
  PUBLIC_DEPS prsgd::runtime prsgd::transport msgpackc-cxx
  PRIVATE_DEPS ZLIB::ZLIB)
