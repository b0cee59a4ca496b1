#!/usr/bin/env bash
# Scale benchmark: how the rewrite's time and memory grow with the number of nodes. Rewrites
# gen-chain's chains of 10k, 100k and 1M nodes with every built-in rule under the default
# target and under --target ort, next to proto-roundtrip (parse + serialize + write) of the same
# file measured in the same run, and prints one Markdown table.
#
# Builds nothing: build first (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build
# build -j2); uses gen-chain, proto-roundtrip, bench-measure and onnx-rewrite from $BUILD_DIR.
# Warm page cache, one unmeasured warm-up run per row.
#
# Environment: BUILD_DIR (default <repo>/build), BENCH_DIR (default /tmp/onnx-rewrite-bench),
# RUNS (default 3), SIZES (default "10000 100000 1000000").
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
bench_dir=${BENCH_DIR:-/tmp/onnx-rewrite-bench}
runs=${RUNS:-3}
sizes=${SIZES:-10000 100000 1000000}

die() { echo "scale_bench.sh: $*" >&2; exit 1; }
for tool in gen-chain proto-roundtrip bench-measure onnx-rewrite; do
  [[ -x $build_dir/$tool ]] || die "$build_dir/$tool not built; build the tree first (see the top of this script)"
done
command -v jq >/dev/null || die "needs jq (apt-get install jq)"
mkdir -p "$bench_dir/chain-out"
bench_dir=$(realpath "$bench_dir")
[[ $bench_dir/ == "$repo"/* ]] && die "BENCH_DIR must be outside the repository"
log=$bench_dir/scale.log
: >"$log"

# measure COMMAND...: prints "median_wall_s median_cpu_s median_peak_rss_kib".
measure() {
  echo "== $*" >>"$log"
  "$build_dir/bench-measure" --runs "$runs" --warmup 1 --json -- "$@" 2>>"$log" |
    jq -r '"\(.median_wall_s) \(.median_cpu_s) \(.median_peak_rss_kib)"' || die "failed: $* (see $log)"
}

echo "| nodes | MB | row | median wall (s) | median CPU (s) | peak RSS (MiB) | CPU µs per node | wall ÷ proto-roundtrip | CPU ÷ proto-roundtrip | RSS ÷ proto-roundtrip |"
echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for size in $sizes; do
  model=$bench_dir/chain-$size.onnx
  [[ -f $model ]] || "$build_dir/gen-chain" --nodes "$size" --out "$model" >&2
  out=$bench_dir/chain-out
  read -r proto_wall proto_cpu proto_rss < <(measure "$build_dir/proto-roundtrip" "$model" "$out/proto.onnx")
  mb=$(stat -c %s "$model" | awk '{ printf "%.1f", $1 / 1e6 }')
  row() {  # LABEL WALL CPU RSS
    awk -v n="$size" -v mb="$mb" -v label="$1" -v wall="$2" -v cpu="$3" -v rss="$4" -v pw="$proto_wall" -v pc="$proto_cpu" \
        -v pr="$proto_rss" 'BEGIN {
      printf "| %d | %s | %s | %.3f | %.3f | %.1f | %.2f | %.2f | %.2f | %.2f |\n", n, mb, label, wall, cpu, rss / 1024,
             cpu / n * 1e6, wall / pw, cpu / pc, rss / pr
    }'
  }
  row proto-roundtrip "$proto_wall" "$proto_cpu" "$proto_rss"
  for target in onnx ort; do
    label="\`rewrite\`"
    [[ $target == ort ]] && label="\`rewrite --target ort\`"
    read -r wall cpu rss < <(measure "$build_dir/onnx-rewrite" rewrite "$model" -o "$out/$target.onnx" --target "$target")
    row "$label" "$wall" "$cpu" "$rss"
  done
done
echo
echo "$runs runs per row after one warm-up (medians), warm page cache, $(nproc) cores; per-run figures in $log"
