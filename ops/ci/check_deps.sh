#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails on an include that breaks the layering in docs/architecture.md (actors -> runtime -> transport,
# actors -> algorithms, everything -> common).
set -euo pipefail
cd "$(dirname "$0")/../.."
status=0
forbid() { # forbid <dir> <regex> <why>
  local hits
  hits=$(grep -rnE --include='*.hpp' --include='*.cpp' "$2" "$1" 2>/dev/null | grep -v '^transport/zmq/' || true)
  if [[ -n "$hits" ]]; then
    echo "check_deps: $3"; echo "$hits"; status=1
  fi
}
for d in common runtime algorithms actors transport; do
  forbid "$d" '#include <zmq(\.hpp|_addon\.hpp|\.h)>' "ZeroMQ headers belong in transport/zmq/ only"
  forbid "$d" '#include [<"](prometheus/|civetweb\.h|CivetServer\.h)' "prometheus-cpp / civetweb (prometheus-cpp-dev) belong in cli/ only"
done
forbid transport '#include [<"](Eigen|msgpack|boost/asio|prsgd/(runtime|actors|algorithms))' "transport/ knows nothing of Eigen, msgpack, Asio or actors"
forbid algorithms '#include [<"](msgpack|boost/asio|prsgd/(runtime|actors|transport))' "algorithms/ knows nothing of messaging"
forbid runtime '#include [<"](Eigen|prsgd/(actors|algorithms))' "runtime/ knows nothing of models or PR-SGD"
forbid common '#include [<"](Eigen|msgpack|boost/asio|prsgd/(runtime|actors|algorithms|transport))' "common/ depends on nothing of ours"
if [[ $status -eq 0 ]]; then echo "check_deps: layering OK"; fi
exit $status
