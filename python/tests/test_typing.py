"""The package's types: the stubs of the extension say what it has, with its parameter names, and
mypy --strict finds the package consistent and holds a caller to it."""

import ast
import inspect
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import require, run

USE = '''
import onnx_rewrite

def fix(path: str) -> bytes:
    result = onnx_rewrite.rewrite(path, target="onnx", opset=13, only=["mygroupnorm-decomposition"])
    report: onnx_rewrite.CheckReport = onnx_rewrite.check(result.model_bytes())
    stats: onnx_rewrite.RuleStats = result.rules["mygroupnorm-decomposition"]
    count: int = stats.matches + result.ops_after.get(("", "Add"), 0)
    names = [t.name for t in onnx_rewrite.targets()] + list(onnx_rewrite.builtin_rules().ids)
    try:
        onnx_rewrite.load_rules("my.rules")
    except onnx_rewrite.InputError as e:
        names.append(e.file or "")
    return result.model_bytes() if report.ok and count and names else b""
'''


def mypy(tmp_path, *arguments):
    require("mypy", "python3-mypy")
    import onnx_rewrite
    environment = dict(os.environ, MYPYPATH=str(Path(onnx_rewrite.__file__).parents[1]))
    return run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", tmp_path / "cache",
                *arguments], env=environment, cwd=tmp_path)


def test_mypy_strict_finds_the_package_and_a_typed_caller_consistent(tmp_path):
    (tmp_path / "use.py").write_text(USE)
    for arguments in (["-p", "onnx_rewrite"], ["use.py"]):
        result = mypy(tmp_path, *arguments)
        assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_holds_a_caller_to_the_types(tmp_path):
    (tmp_path / "misuse.py").write_text(USE.replace("opset=13", 'opset="13"').replace("stats.matches", "stats.match"))
    result = mypy(tmp_path, "misuse.py")
    assert result.returncode == 1
    assert 'Argument "opset" to "rewrite" has incompatible type "str"' in result.stdout, result.stdout
    assert '"RuleStats" has no attribute "match"' in result.stdout, result.stdout


def test_the_extensions_stubs_are_the_extension():
    from onnx_rewrite import _core
    stubs = ast.parse((Path(_core.__file__).parent / "_core.pyi").read_text())
    stubbed = {node.name: node for node in stubs.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    public = {name for name in dir(_core) if not name.startswith("_")}
    assert set(stubbed) == public
    for name, node in stubbed.items():
        if isinstance(node, ast.ClassDef):
            members = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
            assert members <= set(dir(getattr(_core, name))), name
            continue
        # pybind11 writes the signature as the docstring's first line: name(a: T, b: U = ...) -> R
        signature = inspect.getdoc(getattr(_core, name)).splitlines()[0]
        runtime = re.findall(r"(\w+): ", signature[signature.index("(") + 1:signature.rindex(")")])
        assert [arg.arg for arg in node.args.args] == runtime, f"{name}: stub {ast.unparse(node.args)} vs {signature}"


@pytest.mark.parametrize("name", ["rewrite", "check", "load_rules", "builtin_rules", "targets"])
def test_the_api_is_documented(name):
    import onnx_rewrite
    doc = inspect.getdoc(getattr(onnx_rewrite, name))
    assert doc
    for parameter in inspect.signature(getattr(onnx_rewrite, name)).parameters:
        assert parameter in doc, f"{name}'s docstring does not explain {parameter}"
