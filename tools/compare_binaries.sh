#!/usr/bin/env bash
# Do two onnx-rewrite binaries write the same bytes? Rewrites every model under the given
# directories (default: testdata/, rules/*/testdata/ and the conformance data set, once
# scripts/fetch-test-data.sh has fetched it into build/test-data/) with every built-in rule,
# under each target, with both binaries, and compares exit codes and outputs.
# Used to prove that a restructure changed no behaviour:
#
#   tools/compare_binaries.sh OLD_BINARY NEW_BINARY [--target T]... [--skip RULE]... [DIR...]
#
# Prints one line per difference and a summary; exits 1 if anything differs.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 OLD_BINARY NEW_BINARY [--target T]... [--skip RULE]... [DIR...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
old=$(realpath "$1") new=$(realpath "$2")
shift 2
targets=() skips=() dirs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) targets+=("$2"); shift 2 ;;
    --skip) skips+=(--skip "$2"); shift 2 ;;
    -*) usage ;;
    *) dirs+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(onnx ort)
if [ ${#dirs[@]} -eq 0 ]; then
  dirs=(testdata rules/*/testdata)
  [ -d build/test-data/conformance ] && dirs+=(build/test-data/conformance/)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
find "${dirs[@]}" -name '*.onnx' -type f | sort > "$work/models"

compare_one() {  # MODEL TARGET: prints a line if the binaries disagree
  local model=$1 target=$2 slot
  slot=$(echo "$model $target" | md5sum | cut -c1-16)
  local a="$work/$slot.old.onnx" b="$work/$slot.new.onnx" old_rc=0 new_rc=0
  "$old" rewrite "$model" -o "$a" --target "$target" "${skips[@]}" >/dev/null 2>"$a.err" || old_rc=$?
  "$new" rewrite "$model" -o "$b" --target "$target" "${skips[@]}" >/dev/null 2>"$b.err" || new_rc=$?
  if [ "$old_rc" != "$new_rc" ]; then
    echo "exit $old_rc -> $new_rc: $model --target $target: $(head -c 300 "$b.err" | tr '\n' ' ')"
  elif [ -f "$a" ] || [ -f "$b" ]; then
    if ! cmp -s "$a" "$b"; then echo "bytes differ: $model --target $target"; fi
  fi
  rm -f "$a" "$b" "$a.err" "$b.err"
}
export -f compare_one
export old new work
export skips_text="${skips[*]:-}"

: > "$work/differences"
for target in "${targets[@]}"; do
  # shellcheck disable=SC2016
  xargs -a "$work/models" -P "$(nproc)" -I{} bash -c 'skips=($skips_text); compare_one "$1" "$2"' _ {} "$target" \
    >> "$work/differences"
done
sort "$work/differences"
count=$(wc -l < "$work/models")
differing=$(wc -l < "$work/differences")
echo "compared $count models x ${#targets[@]} target(s): $differing difference(s)"
[ "$differing" -eq 0 ]
