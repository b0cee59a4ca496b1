#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, builds a small C++ program against it with
# find_package(onnx_rewrite CONFIG), runs it on the bundled example, and checks the result with
# the installed tool; then packs the .deb, looks at its Depends and runs the tool it holds. Both
# times the tool verifies a rewrite with its installed runtime driver, in the ONNX Runtime of the
# repository's node_modules (found through ONNX_REWRITE_NPM_PREFIX, as a user's npm prefix is).
# The Python package, installed each of its three ways (docs/python.md), is imported from where it
# went and rewrites the example as the tool does:
#   python-install   cmake --install into scratch prefixes (PREFIX/lib/python3.X/dist-packages,
#                    and lib/python3/dist-packages under a prefix ending in /usr)
#   python-deb       the python3-onnx-rewrite package cpack makes, unpacked
#   python-pip       pip install --no-build-isolation --no-index from the source tree, offline,
#                    into a venv (--system-site-packages) and with --user
#   install_test.sh SOURCE_DIR BUILD_DIR [install|deb|python-install|python-deb|python-pip] [PYTHON]
set -euo pipefail
source_dir=$1 build_dir=$2 what=${3:-install} python=${4:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$source_dir/testdata/mygroupnorm-opset9.onnx
version=$(sed -n 's/^project(onnx_rewrite VERSION \([0-9.]*\).*/\1/p' "$source_dir/CMakeLists.txt")

# python_works DIRECTORY PYTHON_COMMAND...: the package imports from DIRECTORY (not the source
# tree: run from $work), rewrites the example writing $work/python.onnx, and `python3 -m
# onnx_rewrite` runs the command line.
python_works() {
  local where=$1
  shift
  (cd "$work" && "$@" -c '
import sys, onnx_rewrite
where, model, output = sys.argv[1:]
assert onnx_rewrite.__file__.startswith(where), f"imported from {onnx_rewrite.__file__}, not {where}"
result = onnx_rewrite.rewrite(model, target="onnx", output=output)
assert result.target_met and result.rules["mygroupnorm-decomposition"].matches == 1, result
print("imported from", onnx_rewrite.__file__, "-", result)
' "$where" "$model" "$work/python.onnx")
  grep -qx "onnx-rewrite $version" <<<"$(cd "$work" && "$@" -m onnx_rewrite --version)"
  (cd "$work" && "$@" -m onnx_rewrite check "$work/python.onnx" --target onnx)
  for file in __init__.py __main__.py _errors.py _core.pyi py.typed; do
    [ -f "$where/onnx_rewrite/$file" ] || { echo "not installed: $where/onnx_rewrite/$file"; exit 1; }
  done
}

# The package writes what the tool TOOL writes (both record what they did, the same way).
same_as_tool() {
  "$1" rewrite "$model" -o "$work/tool.onnx" --target onnx >/dev/null
  cmp "$work/python.onnx" "$work/tool.onnx"
}

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
elif [ "$what" = deb ]; then
  (cd "$build_dir" && cpack -G DEB -B "$work/packages" >/dev/null)
  deb="$work/packages/onnx-rewrite_${version}_amd64.deb"
  [ -f "$deb" ] || { echo "no $deb"; ls "$work/packages"; exit 1; }
  depends=$(dpkg-deb -f "$deb" Depends)
  echo "Depends: $depends"
  libraries=(libprotobuf libfmt libonnx libc6 libstdc++6)
  # The allocator the tool links, where it links one (not in sanitizer builds).
  grep -q libmimalloc <<<"$(ldd "$build_dir/onnx-rewrite")" && libraries+=(libmimalloc)
  for library in "${libraries[@]}"; do
    grep -q "$library" <<<"$depends" || { echo "Depends lacks $library"; exit 1; }
  done
  dpkg-deb -x "$deb" "$work/root"
  "$work/root/usr/bin/onnx-rewrite" --version
  "$work/root/usr/bin/onnx-rewrite" rewrite "$model" -o "$work/out.onnx" --target onnx
  "$work/root/usr/bin/onnx-rewrite" check "$work/out.onnx" --target onnx
  verify_installed "$work/root/usr/bin/onnx-rewrite"
  [ -f "$work/root/usr/share/man/man1/onnx-rewrite.1" ] || [ -f "$work/root/usr/share/man/man1/onnx-rewrite.1.gz" ]
  if grep -q dist-packages <<<"$(dpkg-deb -c "$deb")"; then echo "the tool's package holds the Python package"; exit 1; fi
elif [ "$what" = python-install ]; then
  minor=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
  python_works "$work/prefix/lib/python$minor/dist-packages" env PYTHONPATH="$work/prefix/lib/python$minor/dist-packages" "$python"
  same_as_tool "$work/prefix/bin/onnx-rewrite"
  # Under a prefix ending in /usr: where Debian's own Python packages go.
  cmake --install "$build_dir" --prefix "$work/usr" --component python >/dev/null
  python_works "$work/usr/lib/python3/dist-packages" env PYTHONPATH="$work/usr/lib/python3/dist-packages" "$python"
elif [ "$what" = python-deb ]; then
  (cd "$build_dir" && cpack -G DEB -B "$work/packages" >/dev/null)
  deb="$work/packages/python3-onnx-rewrite_${version}_amd64.deb"
  [ -f "$deb" ] || { echo "no $deb"; ls "$work/packages"; exit 1; }
  depends=$(dpkg-deb -f "$deb" Depends)
  echo "Depends: $depends"
  minor=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  grep -q "python3 (>= $minor)" <<<"$depends" || { echo "Depends lacks python3 (>= $minor)"; exit 1; }
  for library in libprotobuf libonnx libc6 libstdc++6; do
    grep -q "$library" <<<"$depends" || { echo "Depends lacks $library"; exit 1; }
  done
  [ "$(dpkg-deb -f "$deb" Suggests)" = python3-onnx ] || { echo "Suggests is not python3-onnx"; exit 1; }
  [ "$(dpkg-deb -f "$deb" Section)" = python ] || { echo "Section is not python"; exit 1; }
  # Only the package, where Debian's python3 finds it.
  others=$(dpkg-deb -c "$deb" | awk '{print $6}' | grep -v '/$' | grep -v '^./usr/lib/python3/dist-packages/onnx_rewrite/' || true)
  [ -z "$others" ] || { echo "unexpected files in $deb: $others"; exit 1; }
  dpkg-deb -x "$deb" "$work/root"
  python_works "$work/root/usr/lib/python3/dist-packages" env PYTHONPATH="$work/root/usr/lib/python3/dist-packages" "$python"
  same_as_tool "$build_dir/onnx-rewrite"
elif [ "$what" = python-pip ]; then
  # As docs/python.md says, offline, from the source tree, into its build-python/ (kept: the second
  # install, and the next run, only copy; beside build/, so that ccache, where there is one, finds
  # the library's objects by the same relative paths), nothing else written into the source tree.
  command -v ccache >/dev/null && export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  status_before=$(git -C "$source_dir" status --porcelain --ignored=no 2>/dev/null || true)
  "$python" -m venv --system-site-packages "$work/venv"
  "$work/venv/bin/pip" install --no-build-isolation --no-index "$source_dir" >"$work/pip-venv.log" 2>&1 ||
    { cat "$work/pip-venv.log"; exit 1; }
  site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
  python_works "$site" "$work/venv/bin/python"
  same_as_tool "$build_dir/onnx-rewrite"
  # Whole, then searched: grep -q stopping early would break pip's pipe.
  grep -qx "Version: $version" <<<"$("$work/venv/bin/pip" show onnx-rewrite)"
  # The one command docs/python.md gives for the machine's python3 itself, into a scratch user site.
  export PYTHONUSERBASE="$work/user"
  "$python" -m pip install --user --break-system-packages --no-build-isolation --no-index "$source_dir" \
    >"$work/pip-user.log" 2>&1 || { cat "$work/pip-user.log"; exit 1; }
  site=$("$python" -c 'import site; print(site.getusersitepackages())')
  python_works "$site" "$python"
  [ "$(git -C "$source_dir" status --porcelain --ignored=no 2>/dev/null || true)" = "$status_before" ] ||
    { echo "pip wrote into the source tree:"; git -C "$source_dir" status --porcelain; exit 1; }
else
  echo "usage: install_test.sh SOURCE_DIR BUILD_DIR [install|deb|python-install|python-deb|python-pip] [PYTHON]"
  exit 2
fi
echo "ok"
