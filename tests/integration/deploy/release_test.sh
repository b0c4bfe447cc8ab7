#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# release_test.sh BUILD_DIR SOURCE_DIR: ops/release --image none makes the source tarball and the .deb
# with a SHA256SUMS that checks; the tarball holds what is committed (LICENSE, no .git); prsgd --version
# of a build from a git checkout names the commit, and the version module falls back to the project
# version in the unpacked tarball, which is no git checkout. (The image part is ops/container/build,
# tested by deploy_container_image.) The release stays in BUILD_DIR/deploy-test-dist, where deploy_deb_package
# takes its .deb instead of packing another.
set -euo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
source "$(dirname "$0")/common.sh"
need_tool git
need_tool cpack
need_tool dpkg-shlibdeps
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || skip "the source is not a git checkout"
fail() { echo "FAILED: $*"; exit 1; }
dist="$build/deploy-test-dist"
rm -rf "$dist"

"$src/ops/release" --out "$dist" --build-dir "$build" --image none --allow-dirty >"$scratch/release.log" 2>&1 ||
  { cat "$scratch/release.log"; fail "ops/release"; }
cat "$scratch/release.log"
(cd "$dist" && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS does not check"
tarball=$(ls "$dist"/prsgd-*.tar.gz)
ls "$dist"/prsgd_*.deb >/dev/null || fail "no .deb"
[[ $(wc -l <"$dist/SHA256SUMS") == 2 ]] || fail "SHA256SUMS should list the tarball and the .deb"
top=$(basename "$tarball" .tar.gz)
tar -C "$scratch" -xzf "$tarball"
[[ -f "$scratch/$top/LICENSE" && -f "$scratch/$top/CMakeLists.txt" ]] || fail "the tarball lacks LICENSE or CMakeLists.txt"
[[ ! -e "$scratch/$top/.git" ]] || fail "the tarball holds .git"
grep -q "Apache License" "$scratch/$top/LICENSE" || fail "LICENSE is not the Apache licence"
# A second release into the same directory is refused.
"$src/ops/release" --out "$dist" --build-dir "$build" --image none --allow-dirty >/dev/null 2>&1 &&
  fail "a second release into the same directory was not refused"

# The version: from the checkout, the git description; from the tarball, the project version alone.
version=$("$build/cli/prsgd" --version)
echo "$version"
[[ "$version" =~ ^prsgd\ [0-9]+\.[0-9]+\.[0-9]+\ \(git\ [0-9a-z.-]+\)$ ]] || fail "--version names no commit: $version"
in_tarball=$(cmake -DPROJECT_SOURCE_DIR="$scratch/$top" -DPROJECT_VERSION=9.8.7 -P "$src/ops/cmake/prsgd_version.cmake" 2>&1)
[[ "$in_tarball" == *"prsgd version: 9.8.7" ]] || fail "no fallback to the project version: $in_tarball"
echo "PASSED"
