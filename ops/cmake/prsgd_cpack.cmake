# SPDX-License-Identifier: Apache-2.0
# The Debian package: `cpack -G DEB --config BUILD/CPackConfig.cmake` packs what `cmake --install`
# installs (the prsgd command, the shared libraries, the headers and the CMake package, the systemd units
# with their sysusers.d/tmpfiles.d configuration, the docs) under /usr. Its postinst creates the prsgd
# user and /etc/prsgd, /var/lib/prsgd from that configuration.
# The runtime Depends come from dpkg-shlibdeps reading the ELF files, so they always match what the
# binaries load; the -dev packages a find_package(prsgd) consumer needs are Recommends.
set(CPACK_PACKAGE_NAME prsgd)
set(CPACK_PACKAGE_VENDOR "prsgd developers")
set(CPACK_PACKAGE_CONTACT "prsgd developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "communication-efficient distributed training (Parallel Restarted SGD)")
set(CPACK_PACKAGE_DESCRIPTION
    "prsgd trains models with Parallel Restarted SGD on workers that average over ZeroMQ.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# prsgd's own libraries are in the package itself; dpkg-shlibdeps finds them through the binaries'
# RPATH ($ORIGIN/../lib), so they need no shlibs entry.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "libeigen3-dev, libmsgpack-cxx-dev, libboost-dev, libspdlog-dev, cppzmq-dev, zlib1g-dev, libzstd-dev, libcli11-dev, libyaml-cpp-dev, libblas-dev")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "dataset-fashion-mnist, python3-zmq, python3-msgpack, python3-numpy, python3-torch")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/ops/systemd/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR DEB)
include(CPack)
