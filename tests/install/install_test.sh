#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds a small C++ program against it with
# find_package(onnx_rewrite CONFIG), runs it on the bundled example, and checks the result with
# the installed tool; then packs the .deb, looks at its Depends and runs the tool it holds. Both
# times the tool verifies a rewrite with its installed runtime driver, in the ONNX Runtime of the
# repository's node_modules (found through ONNX_REWRITE_NPM_PREFIX, as a user's npm prefix is).
#   install_test.sh SOURCE_DIR BUILD_DIR [install|deb]
set -euo pipefail
source_dir=$1 build_dir=$2 what=${3:-install}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$source_dir/testdata/mygroupnorm-opset9.onnx

# `verify` from an installed tree: its own drivers, ONNX Runtime from an npm prefix, and without
# one a usage error naming what to install.
verify_installed() {
  local tool=$1 runnable=$source_dir/testdata/onnxscript-selu.onnx
  [ -f "$(dirname "$tool")/../share/onnx-rewrite/ort-driver/lib/tensor_proto.js" ] || { echo "the runtime drivers are not installed"; exit 1; }
  (cd "$work" && env -u NODE_PATH ONNX_REWRITE_NPM_PREFIX="$source_dir" "$tool" rewrite "$runnable" -o selu.onnx --target onnx --verify) \
    | tee "$work/verify.txt"
  grep -q "verify: match in onnxruntime-node" "$work/verify.txt"
  (cd "$work" && env -u NODE_PATH ONNX_REWRITE_NPM_PREFIX="$source_dir" "$tool" verify "$runnable" selu.onnx --runtime node) >"$work/verify.txt"
  grep -q "verify: match" "$work/verify.txt"
  local status=0
  (cd "$work" && env -u NODE_PATH -u ONNX_REWRITE_NPM_PREFIX "$tool" verify "$runnable" selu.onnx --runtime node 2>"$work/err.txt") || status=$?
  [ "$status" = 2 ] && grep -q "npm install onnxruntime-node" "$work/err.txt" || { echo "no runtime: exit $status"; cat "$work/err.txt"; exit 1; }
}

if [ "$what" = install ]; then
  cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
  for file in bin/onnx-rewrite share/man/man1/onnx-rewrite.1 include/onnx_rewrite/onnx_rewrite.h \
              lib/libonnx_rewrite.a lib/cmake/onnx_rewrite/onnx_rewriteConfig.cmake; do
    [ -e "$work/prefix/$file" ] || { echo "not installed: $file"; exit 1; }
  done
  if [ -e "$work/prefix/include/onnx_rewrite/walk.h" ]; then echo "an internal header was installed"; exit 1; fi
  cmake -S "$source_dir/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
        -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$work/consumer" >/dev/null
  "$work/consumer/consumer" "$model" "$work/out.onnx" | tee "$work/consumer.txt"
  grep -q "^rule mygroupnorm-decomposition: 1$" "$work/consumer.txt"
  grep -q "^target met$" "$work/consumer.txt"
  "$work/prefix/bin/onnx-rewrite" check "$work/out.onnx" --target onnx
  # The library writes what the tool writes (the tool also records what it did, unless told not to).
  "$work/prefix/bin/onnx-rewrite" rewrite "$model" -o "$work/tool.onnx" --target onnx --no-provenance >/dev/null
  cmp "$work/out.onnx" "$work/tool.onnx"
  verify_installed "$work/prefix/bin/onnx-rewrite"
else
  (cd "$build_dir" && cpack -G DEB -B "$work/packages" >/dev/null)
  version=$(sed -n 's/^project(onnx_rewrite VERSION \([0-9.]*\).*/\1/p' "$source_dir/CMakeLists.txt")
  deb="$work/packages/onnx-rewrite_${version}_amd64.deb"
  [ -f "$deb" ] || { echo "no $deb"; ls "$work/packages"; exit 1; }
  depends=$(dpkg-deb -f "$deb" Depends)
  echo "Depends: $depends"
  libraries=(libprotobuf libfmt libonnx libc6 libstdc++6)
  # The allocator the tool links, where it links one (not in sanitizer builds).
  ldd "$build_dir/onnx-rewrite" | grep -q libmimalloc && libraries+=(libmimalloc)
  for library in "${libraries[@]}"; do
    grep -q "$library" <<<"$depends" || { echo "Depends lacks $library"; exit 1; }
  done
  dpkg-deb -x "$deb" "$work/root"
  "$work/root/usr/bin/onnx-rewrite" --version
  "$work/root/usr/bin/onnx-rewrite" rewrite "$model" -o "$work/out.onnx" --target onnx
  "$work/root/usr/bin/onnx-rewrite" check "$work/out.onnx" --target onnx
  verify_installed "$work/root/usr/bin/onnx-rewrite"
  [ -f "$work/root/usr/share/man/man1/onnx-rewrite.1" ] || [ -f "$work/root/usr/share/man/man1/onnx-rewrite.1.gz" ]
fi
echo "ok"
