#!/usr/bin/env bash
# bench/fusion_bench.sh on a one-layer BERT: exit 0 when the rewrite computes what the original
# does, and exit 1 naming the failed check when `onnx-rewrite rewrite` is made to rewrite another
# model (same graph, other weights) in its place.
#
#   tests/bench/fusion_bench_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail

source_dir=$1
build_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The bench's tools, with onnx-rewrite wrapped: `rewrite` reads $PLANTED instead of its input.
mkdir "$tmp/build"
ln -s "$build_dir/gen-bert" "$build_dir/bench-measure" "$tmp/build/"
cat >"$tmp/build/onnx-rewrite" <<EOF
#!/usr/bin/env bash
if [[ \$1 == rewrite && -n \${PLANTED:-} ]]; then set -- rewrite "\$PLANTED" "\${@:3}"; fi
exec "$build_dir/onnx-rewrite" "\$@"
EOF
chmod +x "$tmp/build/onnx-rewrite"

small=(--layers 1 --hidden 32 --heads 2 --intermediate 64)
mkdir "$tmp/bench"
"$build_dir/gen-bert" "${small[@]}" --out "$tmp/bench/bert-base.onnx" >/dev/null
"$build_dir/gen-bert" "${small[@]}" --seed 2 --out "$tmp/other-weights.onnx" >/dev/null

bench() { BUILD_DIR=$tmp/build BENCH_DIR=$tmp/bench RUNS=1 "$source_dir/bench/fusion_bench.sh" >"$tmp/out" 2>"$tmp/err"; }
fail() { echo "FAILED: $*" >&2; cat "$tmp/out" "$tmp/err" >&2; exit 1; }

bench || fail "exit $? with a faithful rewrite"
grep -q '^check: .*same' "$tmp/out" || fail "no passing check line"
if PLANTED=$tmp/other-weights.onnx bench; then fail "exit 0 with a rewrite of another model"; fi
grep -q '^check FAILED' "$tmp/out" || fail "no failed check line"
echo "fusion_bench.sh: passes a faithful rewrite, fails a planted one"
