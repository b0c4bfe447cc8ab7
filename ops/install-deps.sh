#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every Debian 12 package prsgd's build, tests and examples need. Idempotent: only missing
# packages are installed, and apt-get update runs only when something is missing.
#   ops/install-deps.sh            build + tests + examples (PyTorch too: the export tests load prsgd's
#                                  weights into the PyTorch twins; libpng for `prsgd predict`; gnuplot
#                                  for `prsgd plot`; help2man for the man pages; zsh to check the zsh
#                                  completion; podman, debootstrap, Slurm and kubectl for the deployment tests)
#   ops/install-deps.sh --bench    also CAF for bench/
#                                  clang for the fuzz targets (the fuzz preset, ops/fuzz.sh)
#   ops/install-deps.sh --lint     also clang-tidy (.clang-tidy; clang itself is always installed)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libeigen3-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libspdlog-dev libcli11-dev libyaml-cpp-dev zlib1g-dev libzstd-dev prometheus-cpp-dev
  dataset-fashion-mnist
  espeak-ng sox
  iproute2 procps python3 python3-numpy python3-sklearn python3-zmq python3-msgpack
  libblas-dev libopenblas0-pthread
  libpng-dev python3-torch
  gnuplot-nox help2man zsh
  chromium
  clang-format clang
  podman runc catatonit debootstrap slurm-wlm munge
  openssh-server openssh-client python3-yaml
)
# The Kubernetes render check needs kubectl; Debian's comes with kubernetes-client, which cannot be
# installed next to another kubectl package (then the one present is used).
command -v kubectl >/dev/null || packages+=(kubernetes-client)
case "${1:-}" in
  "") ;;
  --bench) packages+=(libcaf-dev libopenblas0-pthread) ;;
  --lint) packages+=(clang-tidy) ;;
  *) echo "install-deps: unknown option '$1' (use --bench or --lint)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
