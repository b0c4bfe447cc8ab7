# SPDX-License-Identifier: Apache-2.0
# prsgd::wire: the msgpack envelope codec and (once prsgd::runtime and prsgd::transport exist) the
# remote-actor layer. Included from runtime/CMakeLists.txt; paths are relative to this file.
prsgd_add_library(wire
  DIR ${CMAKE_CURRENT_LIST_DIR}
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/src/wire/envelope.cpp
  PUBLIC_DEPS prsgd::transport msgpackc-cxx
  PRIVATE_DEPS ZLIB::ZLIB)
