#!/usr/bin/env bash
# Batch throughput: `batch -j 1` against `batch -j 2` over a zoo of real models, RUNS runs each
# taken in turns, and the ratio (issue #11 asks for at least 1.8x on 2 cores). The zoo is COPIES
# copies of every MODELS_DIR/*/model.onnx (fetch them with ../shared/models/fetch.sh), under
# --target ort.
#
# The baseline measured alongside: two separate `batch -j 1` processes at once, each over half of
# the zoo (the models dealt out by size). They share nothing but the machine, so their ratio is
# what two cores give this work here; `-j 2` against them is what the tool's own parallelism
# loses or gains.
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
mkdir -p "$bench_dir/half-1" "$bench_dir/half-2"
half=1
while IFS= read -r model; do  # biggest first, every other one to each half
  ln "$bench_dir/zoo/$model" "$bench_dir/half-$half/$model"
  half=$((3 - half))
done < <(ls -S "$bench_dir/zoo")
sync  # the zoo's copies on disk now, not by the kernel's flusher during the runs

batch() {  # zoo output jobs
  "$build_dir/onnx-rewrite" batch "$1" -o "$2" -j "$3" --target ort >/dev/null 2>&1 || true
}
seconds() {  # 1, 2 or halves: one batch (or the two halves' at once, into one directory as -j 2 writes), the output new
  rm -rf "$bench_dir/out"
  local start end
  start=$(date +%s.%N)
  if [[ $1 == halves ]]; then
    batch "$bench_dir/half-1" "$bench_dir/out" 1 &
    batch "$bench_dir/half-2" "$bench_dir/out" 1
    wait
  else
    batch "$bench_dir/zoo" "$bench_dir/out" "$1"
  fi
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
median() { sort -n | awk '{a[NR] = $1} END {print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# The three settings in turns, each round starting one further along, so that a machine that
# slows down or speeds up during the bench weighs on all alike; each round gives ratios of its own.
seconds 1 >/dev/null && seconds 2 >/dev/null && seconds halves >/dev/null  # warm-up
settings=(1 2 halves)
ones=() twos=() halves=() ratios=() ceilings=()
for run in $(seq 1 "$runs"); do
  declare -A took=()
  for k in 0 1 2; do
    setting=${settings[$(((run + k) % 3))]}
    took[$setting]=$(seconds "$setting")
  done
  ones+=("${took[1]}") twos+=("${took[2]}") halves+=("${took[halves]}")
  ratios+=("$(echo "${took[1]} / ${took[2]}" | bc -l)") ceilings+=("$(echo "${took[1]} / ${took[halves]}" | bc -l)")
done
rm -rf "$bench_dir/out"
one=$(printf '%s\n' "${ones[@]}" | median)
two=$(printf '%s\n' "${twos[@]}" | median)
apart=$(printf '%s\n' "${halves[@]}" | median)
ratio=$(printf '%s\n' "${ratios[@]}" | median)
ceiling=$(printf '%s\n' "${ceilings[@]}" | median)
echo "| models | -j 1 (s) | -j 2 (s) | two -j 1 on halves (s) | -j 2 / -j 1 (medians) | (pairs) | halves / -j 1 (medians) | (pairs) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '| %d | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.2fx | %.2fx |\n' "$count" "$one" "$two" "$apart" \
  "$(echo "$one / $two" | bc -l)" "$ratio" "$(echo "$one / $apart" | bc -l)" "$ceiling"
