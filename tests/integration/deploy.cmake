# SPDX-License-Identifier: Apache-2.0
# Deployment: the container image, the Debian package, the Kubernetes manifests and the Slurm batch
# script, each run for real on this machine (podman, dpkg, podman kube play, a one-node Slurm cluster).
# They package the Release build; under sanitizers the binaries would need the sanitizer runtimes in the
# image, so only the render check is registered there. Each exits 77 (skipped, with the reason) when
# its tools are missing or it does not run as root.
set(deploy_dir ${CMAKE_CURRENT_LIST_DIR}/deploy)

add_test(NAME deploy_k8s_render COMMAND ${deploy_dir}/k8s_render_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(deploy_k8s_render PROPERTIES LABELS integration TIMEOUT 120 SKIP_RETURN_CODE 77)

if(TARGET prsgd AND NOT PRSGD_SANITIZERS)
  # The image around this build's install tree, made once for the tests that run it and removed after them.
  add_test(NAME deploy_test_image
           COMMAND ${deploy_dir}/test_image.sh build ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  add_test(NAME deploy_test_image_remove COMMAND ${deploy_dir}/test_image.sh remove ${PROJECT_BINARY_DIR})
  # The image from the install tree of this build (the runtime stage of the Containerfile around it):
  # `prsgd local` in one container and a CURVE job of three containers. The first run also makes the
  # Debian base image with debootstrap (a few minutes); later runs reuse it and the cached layers.
  add_test(NAME deploy_container_image
           COMMAND ${deploy_dir}/container_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  # The job rendered from ops/k8s (with CURVE keys) played as pods by podman, one more worker pod
  # joining and leaving mid-job.
  add_test(NAME deploy_k8s_kube_play
           COMMAND ${deploy_dir}/kube_play_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  # The .deb made by CPack (deploy_release's): Depends cover every library its binaries load; unpacked, it
  # runs a job.
  add_test(NAME deploy_deb_package
           COMMAND ${deploy_dir}/deb_test.sh ${PROJECT_BINARY_DIR})
  # ops/slurm/prsgd.sbatch on a one-node Slurm cluster that the test starts and stops.
  add_test(NAME deploy_slurm_sbatch
           COMMAND ${deploy_dir}/slurm_test.sh $<TARGET_FILE:prsgd> ${PROJECT_SOURCE_DIR})
  # ops/cluster over ssh on three network-namespace hosts, each with an sshd the test starts: copies,
  # CURVE keys, status from the averager's metrics, scale, stop, down, a failed start.
  add_test(NAME deploy_cluster_ssh
           COMMAND ${deploy_dir}/cluster_ssh_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  # ops/release --image none: the source tarball and the .deb with checksums; the version string.
  add_test(NAME deploy_release COMMAND ${deploy_dir}/release_test.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  prsgd_scaled_timeout(timeout 600)
  set_tests_properties(deploy_container_image deploy_release deploy_k8s_kube_play deploy_deb_package deploy_slurm_sbatch
                       deploy_cluster_ssh deploy_test_image deploy_test_image_remove
                       PROPERTIES LABELS integration TIMEOUT ${timeout} SKIP_RETURN_CODE 77
                                  ENVIRONMENT "PRSGD_TEST_TIME_SCALE=${PRSGD_TEST_TIME_SCALE}")
  set_tests_properties(deploy_test_image PROPERTIES FIXTURES_SETUP prsgd_test_image)
  set_tests_properties(deploy_test_image_remove PROPERTIES FIXTURES_CLEANUP prsgd_test_image)
  set_tests_properties(deploy_container_image deploy_k8s_kube_play PROPERTIES FIXTURES_REQUIRED prsgd_test_image)
  set_tests_properties(deploy_release PROPERTIES FIXTURES_SETUP prsgd_release_dist)
  set_tests_properties(deploy_deb_package PROPERTIES FIXTURES_REQUIRED prsgd_release_dist)
endif()
