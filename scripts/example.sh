#!/usr/bin/env bash
# The main job on a bundled example: a small PyTorch-style export with custom ops that plain
# runtimes refuse, rewritten for standard ONNX, checked, and proven equal in ONNX Runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh >/dev/null

model=testdata/mygroupnorm-conv.onnx
out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT

echo "== what plain ONNX runtimes see in $model"
build/onnx-rewrite check "$model" --target onnx || true
echo
echo "== rewrite for standard ONNX"
build/onnx-rewrite rewrite "$model" -o "$out_dir/model.onnx" --target onnx
echo
echo "== the rewritten model"
build/onnx-rewrite check "$out_dir/model.onnx" --target onnx
echo
echo "== ONNX Runtime: the rewritten model against a reference written with ai.onnx GroupNormalization-21"
node tests/ort/compare.js testdata/mygroupnorm-conv-reference.onnx "$out_dir/model.onnx" --dim N=2 --trials 3
