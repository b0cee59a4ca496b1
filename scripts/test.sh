#!/usr/bin/env bash
# Installs what is missing, builds, fetches the data sets the tests need (scripts/fetch-test-data.sh)
# and runs the whole test suite (what CI runs); then the tool built with clang in build-clang/ must
# write the same bytes as the g++ build on every test and conformance model, no builder may leave
# the order of its nodes to the compiler, no function in src/ may be over 80 lines, and src/ and
# include/ must be laid out as .clang-format says; then the same suite built with
# AddressSanitizer (leak checks on) and UndefinedBehaviorSanitizer in build-asan/. After each
# run, the tests skipped and why.
#
# ONNX_REWRITE_SKIP_DATA=SET[,SET...] does without those data sets (conformance, models): they
# are not fetched, and the tests that need them are skipped instead of failed. CI sets none.
set -euo pipefail
cd "$(dirname "$0")/.."
ONNX_REWRITE_TESTS=1 scripts/bootstrap.sh
scripts/fetch-test-data.sh

# ctest on a build tree, then what it skipped; ctest's status.
run_suite() {
  local build=$1 status=0
  shift
  ctest --test-dir "$build" --output-on-failure -j 2 "$@" || status=$?
  node scripts/test-summary.js "$build/Testing/Temporary/LastTest.log"
  return $status
}

run_suite build

cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-14 -DBUILD_TESTING=OFF >/dev/null
cmake --build build-clang -j "$(nproc)" --target onnx-rewrite
tools/compare_binaries.sh build/onnx-rewrite build-clang/onnx-rewrite
/usr/bin/python3 tools/check_builder_order.py build
/usr/bin/python3 tools/check_function_length.py build
find src include \( -name '*.cc' -o -name '*.h' \) -print0 | sort -z | xargs -0 clang-format-14 --dry-run --Werror
echo "layout: src/ and include/ as .clang-format lays them out"

# Every sanitizer finding is fatal (-fno-sanitize-recover). The install tests build a consumer
# project against the installed library, which the instrumented build can't serve: they run above,
# as do the tests of scripts that run nothing the build made, and ConversionTypes (every rule's
# example in 7 types at 2 opsets through ONNX Runtime: numbers, proven above; the builders it runs
# are the rule examples', which run here).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONNX_REWRITE_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$(nproc)"
ln -sfn ../build/test-data build-asan/test-data  # the same data sets
ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run_suite build-asan -E '^(Install|FetchTestData|OrtHarness|RealExports|Rules/ConversionTypes)\.'
