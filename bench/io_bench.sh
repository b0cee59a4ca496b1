#!/usr/bin/env bash
# I/O benchmark: how much onnx-rewrite costs over copying a model (cp) and
# over the least a protobuf tool can do (proto-roundtrip: parse + serialize).
#
# Builds nothing: build first (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
# && cmake --build build -j2); it uses gen-bert, proto-roundtrip,
# bench-measure and, when present, onnx-rewrite from $BUILD_DIR.
#
# Models are generated once into $BENCH_DIR (never inside the repo) and
# reused. The page cache is warm: nothing is dropped between runs, and every
# row gets one unmeasured warm-up run, so figures are CPU + memory bandwidth
# cost, not disk speed.
#
# Environment: BUILD_DIR (default <repo>/build), BENCH_DIR (default
# /tmp/onnx-rewrite-bench), RUNS (default 5).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
bench_dir=${BENCH_DIR:-/tmp/onnx-rewrite-bench}
runs=${RUNS:-5}
rules_dir=$repo/bench/rules

die() { echo "io_bench.sh: $*" >&2; exit 1; }
megabytes() { stat -c %s "$1" | awk '{ printf "%.1f", $1 / 1e6 }'; }

for tool in gen-bert proto-roundtrip bench-measure; do
  [[ -x $build_dir/$tool ]] || die "$build_dir/$tool not built; build the tree first (see the top of this script)"
done
command -v jq >/dev/null || die "needs jq (apt-get install jq)"
mkdir -p "$bench_dir"
bench_dir=$(realpath "$bench_dir")
[[ $bench_dir/ == "$repo"/* ]] && die "BENCH_DIR must be outside the repository"

rewrite=$build_dir/onnx-rewrite
have_rewrite=false
[[ -x $rewrite ]] && have_rewrite=true

base=$bench_dir/bert-base.onnx
large=$bench_dir/large/bert-large.onnx
if [[ ! -f $base ]]; then
  "$build_dir/gen-bert" --out "$base"
fi
if [[ ! -f $large || ! -f $large.data ]]; then
  mkdir -p "$(dirname "$large")"
  "$build_dir/gen-bert" --layers 24 --hidden 1024 --heads 16 --intermediate 4096 --external-data --out "$large"
fi

log=$bench_dir/measure.log
: >"$log"

# Rows of the table being built: label, median wall, min, max, median RSS (KiB)
# or the reason the row has no figures.
labels=() walls=() mins=() maxs=() rsss=() notes=()

# measure LABEL COMMAND...: adds a row from $runs timed runs after one warm-up.
measure() {
  local label=$1 summary
  shift
  echo "measuring: $label" >&2
  echo "== $label: $*" >>"$log"
  if summary=$("$build_dir/bench-measure" --runs "$runs" --warmup 1 --json -- "$@" 2>>"$log"); then
    labels+=("$label")
    walls+=("$(jq -r .median_wall_s <<<"$summary")")
    mins+=("$(jq -r .min_wall_s <<<"$summary")")
    maxs+=("$(jq -r .max_wall_s <<<"$summary")")
    rsss+=("$(jq -r .median_peak_rss_kib <<<"$summary")")
    notes+=("")
  else
    skip "$label" "failed, see $log"
  fi
}

# skip LABEL REASON: adds a row without figures.
skip() {
  labels+=("$1") walls+=("") mins+=("") maxs+=("") rsss+=("") notes+=("$2")
}

# print_table TITLE: prints the rows as a Markdown table, with ratios to the
# rows labelled "proto-roundtrip" and "cp", then clears them.
print_table() {
  local i proto_wall="" proto_rss="" cp_wall=""
  for i in "${!labels[@]}"; do
    case ${labels[i]} in
      proto-roundtrip) proto_wall=${walls[i]} proto_rss=${rsss[i]} ;;
      cp) cp_wall=${walls[i]} ;;
    esac
  done
  printf '\n### %s\n\n' "$1"
  echo "| row | median wall (s) | min–max (s) | median peak RSS (MiB) | wall ÷ proto-roundtrip | RSS ÷ proto-roundtrip | wall ÷ cp |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for i in "${!labels[@]}"; do
    if [[ -n ${notes[i]} ]]; then
      echo "| \`${labels[i]}\` | ${notes[i]} | | | | | |"
      continue
    fi
    awk -v label="${labels[i]}" -v wall="${walls[i]}" -v lo="${mins[i]}" -v hi="${maxs[i]}" \
        -v rss="${rsss[i]}" -v pw="$proto_wall" -v pr="$proto_rss" -v cw="$cp_wall" 'BEGIN {
      ratio = "%.2f";
      printf "| `%s` | %.3f | %.3f–%.3f | %.1f | %s | %s | %s |\n", label, wall, lo, hi, rss / 1024,
             pw != "" ? sprintf(ratio, wall / pw) : "–",
             pr != "" ? sprintf(ratio, rss / pr) : "–",
             cw != "" ? sprintf(ratio, wall / cw) : "–"
    }'
  done
  labels=() walls=() mins=() maxs=() rsss=() notes=()
}

no_rewrite_note="skipped: $rewrite not built yet"
shopt -s nullglob
rule_files=("$rules_dir"/*.rules)
shopt -u nullglob

# 1. Single-file BERT-base.
out=$bench_dir/out
mkdir -p "$out"
measure cp cp "$base" "$out/cp.onnx"
measure proto-roundtrip "$build_dir/proto-roundtrip" "$base" "$out/proto.onnx"
if $have_rewrite; then
  measure "rewrite --no-builtin-rules" "$rewrite" rewrite "$base" -o "$out/rewrite.onnx" --no-builtin-rules
else
  skip "rewrite --no-builtin-rules" "$no_rewrite_note"
fi
if $have_rewrite; then
  # The opset converter on the whole model: 124 nodes lowered from 14 to 11, weights spliced.
  measure "rewrite --opset 11" "$rewrite" rewrite "$base" -o "$out/opset11.onnx" --opset 11
else
  skip "rewrite --opset 11" "$no_rewrite_note"
fi
if ((${#rule_files[@]} == 0)); then
  skip "rewrite --rules bench/rules/" "skipped: no *.rules file in bench/rules/"
elif $have_rewrite; then
  measure "rewrite --rules bench/rules/" "$rewrite" rewrite "$base" -o "$out/rules.onnx" \
    --no-builtin-rules --rules "$rules_dir/"
else
  skip "rewrite --rules bench/rules/" "$no_rewrite_note"
fi
print_table "$(basename "$base"): $(megabytes "$base") MB, single file"

# 2. BERT-large with external data: every row must leave a usable model with
# its data next to it, so rewriting into another directory includes moving
# (copying or linking) the data file.
large_name=$(basename "$large")
for dir in cp proto rewrite inplace; do mkdir -p "$out/large-$dir"; done
measure cp cp "$large" "$large.data" "$out/large-cp/"
measure proto-roundtrip "$build_dir/proto-roundtrip" "$large" "$out/large-proto/$large_name"
if $have_rewrite; then
  measure "rewrite into another directory" "$rewrite" rewrite "$large" -o "$out/large-rewrite/$large_name" \
    --no-builtin-rules
  if [[ -z $(find -L "$out/large-rewrite" -type f -size +1G) ]]; then
    echo "io_bench.sh: warning: $out/large-rewrite has no external data file next to the model" >&2
  fi
  # In place on a copy, so a failing rewrite cannot spoil the generated model.
  cp "$large" "$large.data" "$out/large-inplace/"
  measure "rewrite in place" "$rewrite" rewrite "$out/large-inplace/$large_name" --in-place --no-builtin-rules
else
  skip "rewrite into another directory" "$no_rewrite_note"
  skip "rewrite in place" "$no_rewrite_note"
fi
print_table "$large_name: $(megabytes "$large") MB + $(megabytes "$large.data") MB of external data"

echo
echo "$runs runs per row after one warm-up, warm page cache, $(nproc) cores; per-run figures in $log"
