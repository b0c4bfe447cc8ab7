# SPDX-License-Identifier: Apache-2.0
# What a system installation (the .deb) needs beyond the binaries and libraries: the systemd units, the
# sysusers.d and tmpfiles.d configuration creating the prsgd user, /etc/prsgd and /var/lib/prsgd, example
# role configurations, and the documentation the units point at (share/doc/prsgd, with the licence).
# The units run /usr/bin/prsgd, where the .deb puts it; for another prefix, override ExecStart= with a
# drop-in (`systemctl edit`).
set(prsgd_systemd_dir ${PROJECT_SOURCE_DIR}/ops/systemd)
install(FILES ${prsgd_systemd_dir}/prsgd-averager.service ${prsgd_systemd_dir}/prsgd-head.service
              ${prsgd_systemd_dir}/prsgd-worker@.service
        DESTINATION lib/systemd/system)
install(FILES ${prsgd_systemd_dir}/sysusers.conf DESTINATION lib/sysusers.d RENAME prsgd.conf)
install(FILES ${prsgd_systemd_dir}/tmpfiles.conf DESTINATION lib/tmpfiles.d RENAME prsgd.conf)
install(FILES ${prsgd_systemd_dir}/averager.yaml ${prsgd_systemd_dir}/worker.yaml ${prsgd_systemd_dir}/head.yaml
              ${prsgd_systemd_dir}/prsgd.env
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
file(GLOB prsgd_docs ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md ${prsgd_docs}
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
# Debian keeps the licence of a package as /usr/share/doc/PACKAGE/copyright.
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME copyright)
