#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks (only what is missing), the ONNX Runtime test
# harness from npm, and builds onnx-rewrite into build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# graphviz: `rewrite --html` draws with dot. The test suite also renders that page in Chromium.
packages=(cmake make g++ libonnx-dev libprotobuf-dev libcli11-dev libfmt-dev libmimalloc-dev libgtest-dev ca-certificates dpkg-dev graphviz)
# The tests also build with clang (the same bytes from both compilers) and read the builders'
# syntax trees with it (tools/check_builder_order.py).
[ "${ONNX_REWRITE_TESTS:-0}" = 1 ] && packages+=(chromium clang-14 python3-clang-14)
node_ok() { command -v node >/dev/null && [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 18 ]; }
node_ok && command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The package's post-install would fetch GPU binaries from a host this network can't reach;
# the CPU binary ships in the package itself.
if [ ! -d node_modules/onnxruntime-node ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "bootstrap: installing the ONNX Runtime harness (npm ci)"
  ONNXRUNTIME_NODE_INSTALL=skip npm ci --no-audit --no-fund --loglevel=error
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
