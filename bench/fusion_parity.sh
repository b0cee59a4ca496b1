#!/usr/bin/env bash
# Fusion parity with ONNX Runtime: for each real model, ORT's own optimizer at level "extended"
# (tests/ort/optimize.js, i.e. graphOptimizationLevel 'extended' + optimizedModelFilePath) and
# `onnx-rewrite rewrite --target ort`, side by side: nodes before, nodes after each, and the fused
# ops each made (tests/ort/fused_ops.js; If/Loop bodies counted too). Then proves in ORT that
# our output computes what the original does (tests/ort/compare.js, graph optimizations off on
# both sides, seeded random inputs). bench/fusion_bench.sh is the timing counterpart on BERT-base.
#
#   bench/fusion_parity.sh [MODELS_DIR]     (default $MODELS_DIR, else $BUILD_DIR/test-data/models)
#
# MODELS_DIR holds NAME/model.onnx, as scripts/fetch-test-data.sh models writes them (models are
# never committed). The inputs fed to each model are in `inputs` below; a model not listed there is
# fed what its graph declares (compare.js says which dims it needs). Exit 1 if any output differs.
#
# Builds nothing: uses onnx-rewrite from $BUILD_DIR (default <repo>/build), node with the
# repository's node_modules (tests/ort/README.md) and jq. Outputs go to $OUT_DIR (default
# /tmp/onnx-rewrite-parity).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
models=${1:-${MODELS_DIR:-$build_dir/test-data/models}}
out=${OUT_DIR:-/tmp/onnx-rewrite-parity}

die() { echo "fusion_parity.sh: $*" >&2; exit 2; }
[[ -x $build_dir/onnx-rewrite ]] || die "$build_dir/onnx-rewrite not built (see bench/fusion_bench.sh)"
command -v jq >/dev/null || die "needs jq (apt-get install jq)"
command -v node >/dev/null || die "needs node (ONNX Runtime runs in onnxruntime-node)"
[[ -d $models ]] || die "no models in '$models': fetch them with scripts/fetch-test-data.sh models"
mkdir -p "$out"

# compare.js options per model: sizes for the symbolic dims, and inputs that must hold valid
# values (Silero's sample rate is 8000 or 16000).
declare -A inputs=(
  [oww-embedding-model]="--dim unk__314=2"
  [oww-melspectrogram]="--dim batch_size=1 --dim samples=4000"
  [ppocr-mobile-v2-cls]="--dim p2o.DynamicDimension.0=2 --dim p2o.DynamicDimension.1=48 --dim p2o.DynamicDimension.2=192"
  [ppocr-v4-det]="--dim p2o.DynamicDimension.0=1 --dim p2o.DynamicDimension.1=96 --dim p2o.DynamicDimension.2=64"
  [ppocr-v4-rec]="--dim p2o.DynamicDimension.0=2 --dim p2o.DynamicDimension.1=160"
  [silero-vad-legacy]="--dim batch=1 --dim sequence=512 --range sr=16000,16000"
  [silero-vad-v5]="--shape input=1,512 --shape state=2,1,128 --range sr=16000,16000"
  [silero-vad-v6]="--shape input=1,512 --shape state=2,1,128 --range sr=16000,16000"
)

made() { jq -r '[.made | to_entries[] | "\(.key | sub("^com.microsoft."; "")) \(.value)"] | join(", ")'; }

status=0
echo "| model | nodes | ORT extended: nodes | ORT: fused | ORT: fused ops | onnx-rewrite: nodes | ours: fused | ours: fused ops | ours = original in ORT |"
echo "|---|---:|---:|---:|---|---:|---:|---|---|"
for dir in "$models"/*/; do
  name=$(basename "$dir")
  model=$dir/model.onnx
  [[ -f $model ]] || continue
  node "$repo/tests/ort/optimize.js" "$model" "$out/$name.ort.onnx" --level extended >/dev/null
  "$build_dir/onnx-rewrite" rewrite "$model" -o "$out/$name.ours.onnx" --target ort >"$out/$name.ours.log" 2>&1
  mapfile -t counts < <(node "$repo/tests/ort/fused_ops.js" "$model" "$out/$name.ort.onnx" "$out/$name.ours.onnx")
  # shellcheck disable=SC2086  # the per-model options are words
  check=$(node "$repo/tests/ort/compare.js" "$model" "$out/$name.ours.onnx" ${inputs[$name]:-} --trials 2 \
            --rtol 1e-3 --atol 1e-4 --level disabled --json 2>/dev/null || true)
  verdict=$(jq -r 'if .ok then "same \(.outputs | map(.max_abs | tonumber) | max)" else "DIFFERENT: \(.error // (.outputs | map(select(.ok | not) | .message) | join("; ")))" end' <<<"$check" 2>/dev/null ||
            echo "DIFFERENT: compare.js failed")
  [[ $verdict == "same "* ]] && verdict=$(printf 'same, max abs %.2g' "${verdict#same }")
  [[ $verdict == same* ]] || status=1
  echo "| $name | $(jq .nodes_before <<<"${counts[0]}") | $(jq .nodes <<<"${counts[0]}") | $(jq .fused <<<"${counts[0]}") | $(made <<<"${counts[0]}") | $(jq .nodes <<<"${counts[1]}") | $(jq .fused <<<"${counts[1]}") | $(made <<<"${counts[1]}") | $verdict |"
done
echo
echo "fused: fused ops in the output beyond those the original had (com.microsoft ops, LayerNormalization, ...). Outputs in $out"
exit $status
