#!/usr/bin/env bash
# The main job on a bundled example: a small PyTorch export (opset 9) of Conv -> custom group
# norm (mydomain::mygroupnorm, the ONNX Runtime custom-op tutorial) -> Relu that plain runtimes
# refuse, rewritten for standard ONNX, checked, and proven equal in ONNX Runtime.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh >/dev/null

model=testdata/mygroupnorm-opset9.onnx
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== what a plain ONNX runtime sees in $model"
build/onnx-rewrite check "$model" --target onnx || true
echo
echo "== rewrite it for standard ONNX (the model's opset 9 is kept)"
build/onnx-rewrite rewrite "$model" -o "$work/rewritten.onnx" --target onnx
echo
echo "== check the result"
build/onnx-rewrite check "$work/rewritten.onnx" --target onnx
echo
# The reference: the same export with the custom op replaced by ONNX Runtime's own
# GroupNormalization-21 kernel (same weights, same epsilon, num_groups = 4).
sed -e 's/ir_version: 4, opset_import: \["": 9, "mydomain": 1\]/ir_version: 10, opset_import: ["": 21]/' \
    -e 's/mydomain.mygroupnorm <epsilon = 1e-05> (onnx_Conv_4, onnx_mygroupnorm_5, norm_weight, norm_bias)/GroupNormalization <epsilon = 1e-05, num_groups = 4> (onnx_Conv_4, norm_weight, norm_bias)/' \
    testdata/mygroupnorm-opset9.onnxtxt > "$work/reference.onnxtxt"
build/text-to-onnx "$work/reference.onnxtxt" "$work/reference.onnx"
echo "== ONNX Runtime: rewritten model vs the reference using ONNX Runtime's GroupNormalization-21"
node tests/ort/compare.js "$work/reference.onnx" "$work/rewritten.onnx" --dim batch=2 --trials 3 --level disabled
