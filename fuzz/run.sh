#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs one for a while:
#   fuzz/run.sh load_model|parse_rules|rewrite SECONDS [libFuzzer options...]
# Seeds come from the test models and rule files in the tree; the corpus grows in
# build-fuzz/corpus/TARGET, and a crashing input is saved as build-fuzz/crash-* (libFuzzer prints
# how to replay it: build-fuzz/fuzz/fuzz_TARGET FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: fuzz/run.sh load_model|parse_rules|rewrite SECONDS}
seconds=${2:?usage: fuzz/run.sh TARGET SECONDS}
shift 2
case "$target" in load_model|parse_rules|rewrite) ;; *) echo "fuzz/run.sh: unknown target '$target'" >&2; exit 2 ;; esac

for package in clang-14 libclang-rt-14-dev libfuzzer-14-dev; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ -n "${missing[*]:-}" ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 -DBUILD_TESTING=OFF \
  -DONNX_REWRITE_SANITIZE=ON -DONNX_REWRITE_FUZZ=ON >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "fuzz_$target"

corpus=build-fuzz/corpus/$target
mkdir -p "$corpus"
if [ "$target" = parse_rules ]; then
  find rules tests bench -name '*.rules' -exec cp -n {} "$corpus/" \;
else
  find rules testdata -name '*.onnx' -exec cp -n {} "$corpus/" \;
fi
cd build-fuzz
exec "./fuzz/fuzz_$target" "corpus/$target" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 "$@"
