#!/usr/bin/python3
# Is any function in src/ longer than 80 lines? A function that long does several things, and
# each deserves a name (docs/design.md, "Style"). Reads each file's syntax tree with clang and
# measures every function, method and constructor defined in it, from its signature to its
# closing brace; lambdas count as part of the function holding them.
#
#   tools/check_function_length.py [BUILD_DIR] [FILE...]   (default: build, src/**/*.cc and *.h)
#
# Exit 1 with file:line, name and length for each function over the limit. Needs
# python3-clang-14 (scripts/bootstrap.sh).
import functools
import glob
import multiprocessing
import os
import sys

import clang.cindex as ci

for library in ("/usr/lib/llvm-14/lib/libclang.so.1", "/usr/lib/llvm-14/lib/libclang.so"):
    if os.path.exists(library):
        ci.Config.set_library_file(library)
        break

LIMIT = 80
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = ci.CursorKind
FUNCTIONS = {K.FUNCTION_DECL, K.CXX_METHOD, K.CONSTRUCTOR, K.DESTRUCTOR, K.FUNCTION_TEMPLATE, K.CONVERSION_FUNCTION}


def long_functions(path, args):
    tu = ci.Index.create().parse(path, args=args)
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        return f"{path}: clang could not parse it: {errors[0]}", []
    real = os.path.realpath(path)
    found = []

    def walk(cursor):
        for child in cursor.get_children():
            if child.location.file is None or os.path.realpath(child.location.file.name) != real:
                continue
            if child.kind in FUNCTIONS and child.is_definition():
                lines = child.extent.end.line - child.extent.start.line + 1
                if lines > LIMIT:
                    found.append((child.extent.start.line, child.spelling, lines))
            else:
                walk(child)  # namespaces, classes

    walk(tu.cursor)
    return None, found


def main(argv):
    build = argv[0] if argv and os.path.isdir(argv[0]) else os.path.join(root, "build")
    files = [a for a in argv if not os.path.isdir(a)] or sorted(
        glob.glob(os.path.join(root, "src/**/*.cc"), recursive=True) + glob.glob(os.path.join(root, "src/**/*.h"), recursive=True))
    # The macros CMake defines for the files that use them; their values don't matter here.
    args = ["-x", "c++", "-std=c++20", "-DONNX_ML=1", "-DONNX_NAMESPACE=onnx", "-DONNX_REWRITE_VERSION=\"0\"",
            "-DONNX_REWRITE_DRIVER_FROM_BIN=\"\"", "-DONNX_REWRITE_DRIVER_SOURCE_DIR=\"\"", f"-I{root}/include", f"-I{root}/src",
            f"-I{build}/src"]
    with multiprocessing.Pool() as pool:
        found = pool.map(functools.partial(long_functions, args=args), files)
    over = 0
    for path, (error, functions) in zip(files, found):
        if error:
            raise SystemExit(error)
        for line, name, lines in functions:
            print(f"{os.path.relpath(path, root)}:{line}: {name} is {lines} lines (at most {LIMIT})")
            over += 1
    print(f"function length: {over} function(s) over {LIMIT} lines in {len(files)} file(s)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
