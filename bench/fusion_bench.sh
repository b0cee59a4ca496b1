#!/usr/bin/env bash
# Fusion benchmark: `onnx-rewrite rewrite --target ort` on the 436 MB BERT-base from gen-bert
# (spelled-out LayerNorm and GELU, as torch exports them below opset 17), side by side with
# ONNX Runtime's own optimize-and-save of the same model (tests/ort/optimize.js at levels
# extended and all): wall time, peak RSS and the fused ops each output has.
#
# Builds nothing: build first (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build
# build -j2); it uses gen-bert, bench-measure and onnx-rewrite from $BUILD_DIR, node with the
# repository's node_modules (npm ci, see tests/ort/README.md), and jq.
#
# The model is generated once into $BENCH_DIR (never inside the repo; shared with io_bench.sh)
# and reused. Warm page cache: every row gets one unmeasured warm-up run before its $RUNS
# measured ones. The ORT rows' RSS includes node itself (~75 MiB).
#
# Environment: BUILD_DIR (default <repo>/build), BENCH_DIR (default /tmp/onnx-rewrite-bench),
# RUNS (default 5). Exit 1 when a row can't be measured or the rewritten model computes something
# else than the original (tests/bench/fusion_bench_test.sh plants such a rewrite).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
bench_dir=${BENCH_DIR:-/tmp/onnx-rewrite-bench}
runs=${RUNS:-5}

die() { echo "fusion_bench.sh: $*" >&2; exit 1; }

for tool in gen-bert bench-measure onnx-rewrite; do
  [[ -x $build_dir/$tool ]] || die "$build_dir/$tool not built; build the tree first (see the top of this script)"
done
command -v jq >/dev/null || die "needs jq (apt-get install jq)"
command -v node >/dev/null || die "needs node (ONNX Runtime runs in onnxruntime-node)"
[[ -d $repo/node_modules/onnxruntime-node ]] || die "onnxruntime-node is not installed; see tests/ort/README.md"
mkdir -p "$bench_dir"
bench_dir=$(realpath "$bench_dir")
[[ $bench_dir/ == "$repo"/* ]] && die "BENCH_DIR must be outside the repository"

base=$bench_dir/bert-base.onnx
[[ -f $base ]] || "$build_dir/gen-bert" --out "$base"
out=$bench_dir/fusion
mkdir -p "$out"
log=$out/measure.log
: >"$log"

rewrite=$build_dir/onnx-rewrite
optimize=$repo/tests/ort/optimize.js

# The ops that stand for a fusion: every com.microsoft op and the standard ops the fusions make.
fused_ops() {
  "$rewrite" inspect --json "$1" | jq -r '
    [.ops[] | select(.domain == "com.microsoft" or
                     (.domain == "ai.onnx" and (.op_type | test("^(LayerNormalization|RMSNormalization|Gelu|Swish)$"))))
            | "\(.op_type) \(.count)"] | join(", ")'
}
node_count() { "$rewrite" inspect --json "$1" | jq '[.ops[].count] | add'; }

# row LABEL OUTPUT COMMAND...: $RUNS timed runs after one warm-up, then what OUTPUT holds.
row() {
  local label=$1 output=$2 summary
  shift 2
  echo "measuring: $label" >&2
  echo "== $label: $*" >>"$log"
  if ! summary=$("$build_dir/bench-measure" --runs "$runs" --warmup 1 --json -- "$@" 2>>"$log"); then
    echo "| $label | failed, see $log | | | | |"
    status=1
    return
  fi
  jq -r --arg name "$label" --arg nodes "$(node_count "$output")" --arg fused "$(fused_ops "$output")" \
    '"| \($name) | \(.median_wall_s * 1000 | round / 1000) | \(.min_wall_s * 1000 | round / 1000)–\(.max_wall_s * 1000 | round / 1000) | \(.median_peak_rss_kib / 1024 * 10 | round / 10) | \($nodes) | \($fused) |"' \
    <<<"$summary"
}

echo
echo "### $(basename "$base"): $(stat -c %s "$base" | awk '{ printf "%.1f", $1 / 1e6 }') MB, $(node_count "$base") nodes"
echo
echo "| row | median wall (s) | min–max (s) | median peak RSS (MiB) | nodes | fused ops in the output |"
echo "|---|---:|---:|---:|---:|---|"
status=0
row "\`onnx-rewrite rewrite --target ort\`" "$out/rewrite.onnx" "$rewrite" rewrite "$base" -o "$out/rewrite.onnx" --target ort
for level in extended all; do
  row "ORT optimize.js \`--level $level\`" "$out/ort-$level.onnx" node "$optimize" "$base" "$out/ort-$level.onnx" --level "$level"
done

# The rewritten model computes what the original does (ORT, graph optimizations off).
echo
if check=$(node "$repo/tests/ort/compare.js" "$base" "$out/rewrite.onnx" --dim batch=2 --dim sequence=32 \
  --range input_ids=0,30521 --range token_type_ids=0,1 --range attention_mask=0,1 --trials 2 --level disabled 2>&1); then
  echo "check: $(tail -n 2 <<<"$check" | tr '\n' ' ')"
else
  echo "check FAILED: the rewritten model does not compute what the original does:"
  echo "$check"
  status=1
fi
echo
echo "$runs runs per row after one warm-up, warm page cache, $(nproc) cores; per-run figures in $log"
exit $status
