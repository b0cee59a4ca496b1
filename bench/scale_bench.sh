#!/usr/bin/env bash
# Scale benchmark: how the rewrite's time and memory grow with the number of nodes. Rewrites
# gen-chain's chains of 10k, 100k and 1M nodes with every built-in rule under the default
# target and under --target ort, next to proto-roundtrip (parse + serialize + write) of the same
# file measured in the same run, and prints one Markdown table. Then the same for the shapes
# where a step quadratic in something other than the node count would show (issue #37):
# local functions nested 1k, 10k and 100k deep (gen-chain --function-depth) and a value read by
# 100k nodes (--fan-out, as lone Erfs and as the Divs of spelled-out GELUs), in a second table.
#
# Builds nothing: build first (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build
# build -j2); uses gen-chain, proto-roundtrip, bench-measure and onnx-rewrite from $BUILD_DIR.
# Warm page cache, one unmeasured warm-up run per row.
#
# Environment: BUILD_DIR (default <repo>/build), BENCH_DIR (default /tmp/onnx-rewrite-bench),
# RUNS (default 3), SIZES (default "10000 100000 1000000"), DEPTHS (default "1000 10000 100000"),
# FAN_OUTS (default "100000"); an empty list leaves its rows out.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
bench_dir=${BENCH_DIR:-/tmp/onnx-rewrite-bench}
runs=${RUNS:-3}
sizes=${SIZES-10000 100000 1000000}
depths=${DEPTHS-1000 10000 100000}
fan_outs=${FAN_OUTS-100000}

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

# generate NAME GEN-CHAIN-ARGS...: the model's path, generated once.
generate() {
  local model=$bench_dir/$1.onnx
  shift
  [[ -f $model ]] || "$build_dir/gen-chain" "$@" --out "$model" >&2
  echo "$model"
}

# measure_rows MODEL LABEL: proto-roundtrip of MODEL, then the rewrite under both targets, one
# table row each: LABEL, MB, row, then from print_row (FIGURES WALL CPU RSS PROTO_WALL PROTO_CPU
# PROTO_RSS) the figures the table has columns for.
measure_rows() {
  local model=$1 label=$2 out=$bench_dir/chain-out proto_wall proto_cpu proto_rss wall cpu rss target row
  read -r proto_wall proto_cpu proto_rss < <(measure "$build_dir/proto-roundtrip" "$model" "$out/proto.onnx")
  local mb
  mb=$(stat -c %s "$model" | awk '{ printf "%.1f", $1 / 1e6 }')
  print_row "$label | $mb | proto-roundtrip" "$proto_wall" "$proto_cpu" "$proto_rss" "$proto_wall" "$proto_cpu" "$proto_rss"
  for target in onnx ort; do
    row="\`rewrite\`"
    [[ $target == ort ]] && row="\`rewrite --target ort\`"
    read -r wall cpu rss < <(measure "$build_dir/onnx-rewrite" rewrite "$model" -o "$out/$target.onnx" --target "$target")
    print_row "$label | $mb | $row" "$wall" "$cpu" "$rss" "$proto_wall" "$proto_cpu" "$proto_rss"
  done
}

if [[ -n $sizes ]]; then
  echo "| nodes | MB | row | median wall (s) | median CPU (s) | peak RSS (MiB) | CPU µs per node | wall ÷ proto-roundtrip | CPU ÷ proto-roundtrip | RSS ÷ proto-roundtrip |"
  echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
  for size in $sizes; do
    print_row() {
      awk -v n="$size" -v first="$1" -v wall="$2" -v cpu="$3" -v rss="$4" -v pw="$5" -v pc="$6" -v pr="$7" 'BEGIN {
        printf "| %s | %.3f | %.3f | %.1f | %.2f | %.2f | %.2f | %.2f |\n", first, wall, cpu, rss / 1024, cpu / n * 1e6,
               wall / pw, cpu / pc, rss / pr
      }'
    }
    measure_rows "$(generate "chain-$size" --nodes "$size")" "$size"
  done
  echo
fi

if [[ -n $depths$fan_outs ]]; then
  echo "| model | MB | row | median wall (s) | median CPU (s) | peak RSS (MiB) | wall ÷ proto-roundtrip | CPU ÷ proto-roundtrip | RSS ÷ proto-roundtrip |"
  echo "|---|---:|---|---:|---:|---:|---:|---:|---:|"
  print_row() {
    awk -v first="$1" -v wall="$2" -v cpu="$3" -v rss="$4" -v pw="$5" -v pc="$6" -v pr="$7" 'BEGIN {
      printf "| %s | %.3f | %.3f | %.1f | %.2f | %.2f | %.2f |\n", first, wall, cpu, rss / 1024, wall / pw, cpu / pc, rss / pr
    }'
  }
  for depth in $depths; do
    measure_rows "$(generate "functions-$depth" --function-depth "$depth")" "functions nested $depth deep"
  done
  declare -A consumer_label=([erf]="Erfs" [gelu]="spelled-out GELUs (Div and Mul read it)")
  for fan_out in $fan_outs; do
    for consumer in erf gelu; do
      measure_rows "$(generate "fan-out-$consumer-$fan_out" --fan-out "$fan_out" --consumer "$consumer")" \
        "a value read by $fan_out ${consumer_label[$consumer]}"
    done
  done
  echo
fi
echo "$runs runs per row after one warm-up (medians), warm page cache, $(nproc) cores; per-run figures in $log"
