# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts in ops/container/: points podman at the project's containers.conf (unless the
# caller set CONTAINERS_CONF) and defines the image names they share.
# shellcheck shell=bash
container_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$container_dir/containers.conf}"
PRSGD_BASE_IMAGE="${PRSGD_BASE_IMAGE:-localhost/debian:bookworm}"
PRSGD_IMAGE="${PRSGD_IMAGE:-localhost/prsgd:latest}"

container_die() { echo "${0##*/}: $*" >&2; exit 2; }

# Fails with a one-line reason when podman is missing.
container_require_podman() {
  command -v podman >/dev/null ||
    container_die "podman not found (apt-get install podman runc catatonit; see docs/deployment.md)"
}

image_exists() { podman image exists "$1"; }
