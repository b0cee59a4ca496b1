#!/usr/bin/env bash
# Batch throughput: `batch -j 1` against `batch -j 2` over a zoo of real models, RUNS runs each
# taken in turns, and the ratio (issue #11 asks for at least 1.8x on 2 cores). The zoo is COPIES
# copies of every MODELS_DIR/*/model.onnx (fetch them with ../shared/models/fetch.sh), under
# --target ort.
#
# Builds nothing: uses onnx-rewrite from $BUILD_DIR. Environment: BUILD_DIR (default <repo>/build),
# MODELS_DIR (default /work/models), BENCH_DIR (default /tmp/onnx-rewrite-batch-bench), RUNS (5),
# COPIES (12).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
models_dir=${MODELS_DIR:-/work/models}
bench_dir=${BENCH_DIR:-/tmp/onnx-rewrite-batch-bench}
runs=${RUNS:-5}
copies=${COPIES:-12}

[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "batch_bench.sh: RUNS must be a number, at least 1" >&2; exit 1; }
[[ -x $build_dir/onnx-rewrite ]] || { echo "batch_bench.sh: build first ($build_dir/onnx-rewrite)" >&2; exit 1; }
compgen -G "$models_dir/*/model.onnx" >/dev/null || { echo "batch_bench.sh: no $models_dir/*/model.onnx" >&2; exit 1; }
rm -rf "$bench_dir" && mkdir -p "$bench_dir/zoo"
for copy in $(seq 1 "$copies"); do
  for model in "$models_dir"/*/model.onnx; do
    cp "$model" "$bench_dir/zoo/$(basename "$(dirname "$model")")-$copy.onnx"
  done
done
count=$(ls "$bench_dir/zoo" | wc -l)
sync  # the zoo's copies on disk now, not by the kernel's flusher during the runs

seconds() {  # jobs: one batch, the output directory new
  rm -rf "$bench_dir/out"
  local start end
  start=$(date +%s.%N)
  "$build_dir/onnx-rewrite" batch "$bench_dir/zoo" -o "$bench_dir/out" -j "$1" --target ort >/dev/null 2>&1 || true
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
median() { sort -n | awk '{a[NR] = $1} END {print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# -j 1 and -j 2 in turns (which goes first alternates), so that a machine that slows down or
# speeds up during the bench weighs on both alike; each pair gives a ratio of its own.
seconds 1 >/dev/null && seconds 2 >/dev/null  # warm-up
ones=() twos=() ratios=()
for run in $(seq 1 "$runs"); do
  if (( run % 2 )); then one=$(seconds 1); two=$(seconds 2); else two=$(seconds 2); one=$(seconds 1); fi
  ones+=("$one") twos+=("$two") ratios+=("$(echo "$one / $two" | bc -l)")
done
one=$(printf '%s\n' "${ones[@]}" | median)
two=$(printf '%s\n' "${twos[@]}" | median)
ratio=$(printf '%s\n' "${ratios[@]}" | median)
echo "| models | -j 1 median (s) | -j 2 median (s) | throughput -j 2 / -j 1 (medians) | median of the pairs' ratios |"
echo "|---:|---:|---:|---:|---:|"
printf '| %d | %.3f | %.3f | %.2fx | %.2fx |\n' "$count" "$one" "$two" "$(echo "$one / $two" | bc -l)" "$ratio"
