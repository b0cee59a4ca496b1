#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
ctest --test-dir build --output-on-failure -j 2
