#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks (only what is missing), the ONNX Runtime test
# harness from npm, and builds onnx-rewrite into build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# graphviz: `rewrite --html` draws with dot. The test suite also renders that page in Chromium,
# reads the benchmarks' JSON with jq, and may fetch the conformance corpus with git.
# pybind11-dev, python3-dev: the Python package (python/, docs/python.md), built with the rest;
# python3-pip, -setuptools, -wheel: its offline `pip install` (the tests check it, and a venv).
# The Python tests export the seed scenarios with PyTorch and compare in ONNX Runtime.
# The tests also build with clang (the same bytes from both compilers), read the sources' syntax
# trees with it (tools/check_builder_order.py, tools/check_function_length.py) and check their
# layout with clang-format (.clang-format).
packages=(cmake make g++ libonnx-dev libprotobuf-dev libcli11-dev libfmt-dev libmimalloc-dev libgtest-dev ca-certificates dpkg-dev graphviz
          pybind11-dev python3-dev python3-pip python3-setuptools python3-wheel)
[ "${ONNX_REWRITE_TESTS:-0}" = 1 ] && packages+=(chromium jq git python3-pytest python3-onnx python3-numpy python3-torch python3-torchvision python3-venv python3-mypy
                                                 clang-14 python3-clang-14 clang-format-14)
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
