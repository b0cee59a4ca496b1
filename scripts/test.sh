#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (what CI runs); then the tool
# built with clang in build-clang/ must write the same bytes as the g++ build on every test and
# conformance model, and no builder may leave the order of its nodes to the compiler; then the
# same suite built with AddressSanitizer (leak checks on) and UndefinedBehaviorSanitizer in build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
ONNX_REWRITE_TESTS=1 scripts/bootstrap.sh
ctest --test-dir build --output-on-failure -j 2

cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-14 -DBUILD_TESTING=OFF >/dev/null
cmake --build build-clang -j "$(nproc)" --target onnx-rewrite
tools/compare_binaries.sh build/onnx-rewrite build-clang/onnx-rewrite
/usr/bin/python3 tools/check_builder_order.py build

# Every sanitizer finding is fatal (-fno-sanitize-recover). The install tests build a consumer
# project against the installed library, which the instrumented build can't serve: they run above.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONNX_REWRITE_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$(nproc)"
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j 2 -E '^Install\.'
