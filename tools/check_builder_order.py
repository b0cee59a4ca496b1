#!/usr/bin/python3
# Does any C++ builder make two nodes in an order C++ leaves to the compiler? The arguments of one
# call are evaluated in an unspecified order (g++ and clang differ), so in
#
#     b.Mul(b.Sqrt(x), b.scalar(2))          b.Where(mask(b, f), x, b.scalar(0))
#
# the two nodes (and so their names and places) come out in either order. Braced lists
# (`b.Concat({b.Sqrt(x), y}, 0)`) and separate statements are evaluated in the order written.
# This reads each file's syntax tree with clang and reports every call, constructor call or
# operator two of whose operands make nodes: a call of a GraphBuilder member that is not const,
# of a function or lambda taking a GraphBuilder, or of a function or lambda of the same file
# whose body makes nodes.
#
#   tools/check_builder_order.py [BUILD_DIR] [FILE...]   (default: build, rules/*/*.cc and the toolkit)
#
# Exit 1 with file:line for each such call. Needs python3-clang-14 (scripts/bootstrap.sh).
import glob
import os
import sys

import clang.cindex as ci

for library in ("/usr/lib/llvm-14/lib/libclang.so.1", "/usr/lib/llvm-14/lib/libclang.so"):
    if os.path.exists(library):
        ci.Config.set_library_file(library)
        break

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = ci.CursorKind


def is_builder_type(type_):
    return type_.get_pointee().get_canonical().spelling.endswith("GraphBuilder") or \
        type_.get_canonical().spelling.endswith("GraphBuilder")


def takes_builder(function):
    return any(is_builder_type(argument.type) for argument in function.get_arguments())


class File:
    def __init__(self, path, args):
        self.path = os.path.realpath(path)
        self.tu = ci.Index.create().parse(path, args=args)
        errors = [d for d in self.tu.diagnostics if d.severity >= ci.Diagnostic.Error]
        if errors:
            raise SystemExit(f"{path}: clang could not parse it: {errors[0]}")
        self.making = {}  # USR of a function or lambda -> does its body make nodes?

    def here(self, cursor):
        return cursor.location.file is not None and os.path.realpath(cursor.location.file.name) == self.path

    def callee_makes_nodes(self, call):
        """Whether a call expression makes nodes when it runs (not counting its arguments)."""
        target = call.referenced
        if target is None:
            # A call through a lambda variable: look at the lambda it was initialized with.
            for child in call.get_children():
                lambda_ = self.lambda_of(child)
                if lambda_ is not None:
                    return self.body_makes_nodes(lambda_)
            return False
        if target.kind == K.CXX_METHOD and target.semantic_parent is not None and \
                target.semantic_parent.spelling == "GraphBuilder":
            return not target.is_const_method()
        if target.kind in (K.FUNCTION_DECL, K.CXX_METHOD, K.FUNCTION_TEMPLATE, K.CONSTRUCTOR):
            if takes_builder(target):
                return True
            definition = target.get_definition()
            if definition is not None and self.here(definition):
                return self.body_makes_nodes(definition)
        if target.kind == K.VAR_DECL:  # a lambda stored in a variable, called
            lambda_ = self.lambda_of(target)
            if lambda_ is not None:
                return self.body_makes_nodes(lambda_)
        return False

    def lambda_of(self, cursor):
        if cursor.kind == K.LAMBDA_EXPR:
            return cursor
        if cursor.kind == K.DECL_REF_EXPR and cursor.referenced is not None and cursor.referenced.kind == K.VAR_DECL:
            return self.lambda_of(cursor.referenced)
        for child in cursor.get_children():
            found = self.lambda_of(child)
            if found is not None:
                return found
        return None

    def body_makes_nodes(self, function):
        key = function.get_usr() or f"{function.location.line}:{function.location.column}"
        if key in self.making:
            return self.making[key]
        self.making[key] = False  # recursion: assume not while looking
        if function.kind == K.LAMBDA_EXPR and takes_builder(function):
            self.making[key] = True
            return True
        self.making[key] = self.makes_nodes(function, skip_self=True)
        return self.making[key]

    def makes_nodes(self, cursor, skip_self=False):
        """Whether evaluating `cursor` makes nodes (lambda bodies count only when called)."""
        if not skip_self and cursor.kind == K.LAMBDA_EXPR:
            return False
        if cursor.kind in (K.CALL_EXPR,) and self.callee_makes_nodes(cursor):
            return True
        return any(self.makes_nodes(child) for child in cursor.get_children())

    def operands(self, cursor):
        """The operands of a call whose order of evaluation is unspecified, or [] if it is specified."""
        if cursor.kind != K.CALL_EXPR:
            return []
        arguments = list(cursor.get_arguments())
        if len(arguments) < 2:
            return []
        if cursor.referenced is not None and cursor.referenced.kind == K.CONSTRUCTOR:
            first = arguments[0].extent.start.offset
            before = [t for t in cursor.get_tokens() if t.extent.end.offset <= first]
            if before and before[-1].spelling == "{":
                return []  # T{a, b}: list-initialization, in order
        return arguments

    def check(self):
        problems = []

        def visit(cursor):
            if self.here(cursor):
                operands = self.operands(cursor)
                making = [operand for operand in operands if self.makes_nodes(operand)]
                if len(making) > 1:
                    problems.append(f"{os.path.relpath(self.path, root)}:{cursor.location.line}:{cursor.location.column}: "
                                    f"{len(making)} operands of one call make nodes; the compiler picks their order "
                                    "(make each in a statement of its own)")
            for child in cursor.get_children():
                if child.location.file is None or self.here(child):
                    visit(child)

        visit(self.tu.cursor)
        return problems


def main(argv):
    build = argv[0] if argv and os.path.isdir(argv[0]) else os.path.join(root, "build")
    files = [a for a in argv if not os.path.isdir(a)] or \
        sorted(f for f in glob.glob(os.path.join(root, "rules/*/*.cc")) if not f.endswith("_test.cc")) + \
        [os.path.join(root, "src/engine/toolkit.cc"), os.path.join(root, "src/rules/build_context.cc")]
    args = ["-x", "c++", "-std=c++20", "-DONNX_ML=1", "-DONNX_NAMESPACE=onnx", f"-I{root}/include", f"-I{root}/src",
            f"-I{build}/src"]
    problems = []
    for path in files:
        problems += File(path, args).check()
    for problem in problems:
        print(problem)
    print(f"{len(files)} files: {len(problems)} calls whose nodes the compiler orders")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
