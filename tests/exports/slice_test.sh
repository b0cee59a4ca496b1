#!/usr/bin/env bash
# ctest's RealExports.Slice (docs/testing.md): the CI slice of the real-export corpus exported with
# Debian's PyTorch (cached in BUILD_DIR/exports-slice, remade when export_corpus.py changes), then
# every case converted with --to-opset to each of the opsets below and run in ONNX Runtime against
# PyTorch's outputs. Fails on any output written with exit 0 that ONNX Runtime refuses or that
# gives other numbers (WRONG, crash), and when fewer conversions succeed than
# docs/real-export-matrix.md records for the slice (FLOOR), so a regression can't land.
#   slice_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build_dir=$2
floor=732  # docs/real-export-matrix.md, the CI slice, targets 7..21: ok
exports=$source_dir/tests/exports
/usr/bin/python3 "$exports/export_corpus.py" "$build_dir/exports-slice" --slice --jobs 2
status=0
/usr/bin/python3 "$exports/conversion_matrix.py" "$build_dir/exports-slice" --bin "$build_dir/onnx-rewrite" \
  --targets 7-21 --no-opset-flag --work "$build_dir/exports-slice-matrix" 2>"$build_dir/exports-slice-matrix.log" ||
  status=$?
cat "$build_dir/exports-slice-matrix.log"
[ "$status" = 0 ] || { echo "conversion_matrix exited $status: WRONG or crashed conversions above"; exit 1; }
ok=$(sed -n 's/^conversion_matrix: --to-opset: \([0-9]*\) ok.*/\1/p' "$build_dir/exports-slice-matrix.log")
[ -n "$ok" ] || { echo "no summary line from conversion_matrix"; exit 1; }
if [ "$ok" -lt "$floor" ]; then
  echo "$ok conversions of the slice succeed, fewer than the $floor docs/real-export-matrix.md records"
  exit 1
fi
echo "ok: $ok conversions succeed (floor $floor), none wrong"
