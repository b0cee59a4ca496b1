"""What the Python tests share: where the tool and the ONNX Runtime harness are, running them, and
holding a Python rewrite to the CLI's on the same file.

ctest runs these files with Debian's python3 against the package in the build tree
(python/CMakeLists.txt sets PYTHONPATH, ONNX_REWRITE_CLI, ONNX_REWRITE_GEN_CHAIN and
ONNX_REWRITE_SOURCE_DIR). By hand, from the repository, after building into build/:

    PYTHONPATH=build/python /usr/bin/python3 -m pytest python/tests

A dependency that is missing fails the test that needs it, naming the package to install: nothing
is skipped silently.
"""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

SOURCE_DIR = Path(os.environ.get("ONNX_REWRITE_SOURCE_DIR") or Path(__file__).resolve().parents[2])


def require(module: str, package: str):
    """Imports `module`, or fails the test saying which Debian package provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        pytest.fail(f"this test needs the Python module {module} ({e}): apt-get install {package}", pytrace=False)


def tool(variable: str, name: str) -> Path:
    """A program of the build tree: $variable (ctest sets it), else build/NAME."""
    path = Path(os.environ.get(variable) or SOURCE_DIR / "build" / name)
    if not path.is_file():
        pytest.fail(f"{path} is missing: build it (cmake --build build --target {name}) or set {variable}", pytrace=False)
    return path


def cli() -> Path:
    return tool("ONNX_REWRITE_CLI", "onnx-rewrite")


def run(command: Sequence[object], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, **kwargs)


def run_cli(*arguments: object) -> subprocess.CompletedProcess:
    return run([cli(), *arguments])


# ---- The ONNX Runtime harness (tests/ort/README.md) --------------------------------------------

def node() -> str:
    found = shutil.which("node")
    if not found:
        pytest.fail("this test runs models in ONNX Runtime through node: apt-get install nodejs npm", pytrace=False)
    if not (SOURCE_DIR / "node_modules" / "onnxruntime-node").is_dir():
        pytest.fail(f"the ONNX Runtime harness is not installed in {SOURCE_DIR}: "
                    "ONNXRUNTIME_NODE_INSTALL=skip npm ci (scripts/bootstrap.sh does it)", pytrace=False)
    return found


def ort_compare(reference: Path, candidate: Path, *options: str) -> dict:
    """tests/ort/compare.js: does `candidate` compute in ONNX Runtime what `reference` does, on
    the harness's random inputs? Returns its --json verdict; exit 2 (a model ORT refuses) fails."""
    result = run([node(), SOURCE_DIR / "tests" / "ort" / "compare.js", reference, candidate, "--json", *options])
    if result.returncode not in (0, 1):
        pytest.fail(f"compare.js {reference.name} {candidate.name} failed (exit {result.returncode}): "
                    f"{result.stderr.strip()} {result.stdout.strip()}", pytrace=False)
    verdict = json.loads(result.stdout)
    assert (result.returncode == 0) == verdict["ok"], result.stdout
    return verdict


def ort_against(model: Path, inputs: Sequence, expected: Sequence, work: Path, rtol: float = 1e-4,
                atol: float = 1e-5) -> dict:
    """Runs `model` in ONNX Runtime on `inputs` (numpy arrays, in the order of the graph's inputs)
    and compares its outputs with `expected` (PyTorch's or numpy's, in the graph's output order):
    tests/ort/conformance.js on a case written as ONNX's backend tests are. Returns its result."""
    numpy_helper = require("onnx.numpy_helper", "python3-onnx")
    case = work / f"case-{model.stem}"
    data = case / "test_data_set_0"
    data.mkdir(parents=True, exist_ok=True)
    for kind, arrays in (("input", inputs), ("output", expected)):
        for index, array in enumerate(arrays):
            (data / f"{kind}_{index}.pb").write_bytes(numpy_helper.from_array(array).SerializeToString())
    jobs = work / f"jobs-{model.stem}.json"
    jobs.write_text(json.dumps([{"case": str(case), "model": str(model), "rtol": rtol, "atol": atol}]))
    result = run([node(), SOURCE_DIR / "tests" / "ort" / "conformance.js", "--jobs", jobs, "--workers", "1"])
    if result.returncode != 0:
        pytest.fail(f"conformance.js failed (exit {result.returncode}): {result.stderr.strip()}", pytrace=False)
    return json.loads(result.stdout)[0]


# ---- The CLI on the same file ------------------------------------------------------------------

def display_domain(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


def cli_rewrite(model: Path, output: Path, *options: str) -> Tuple[int, dict]:
    """`onnx-rewrite rewrite MODEL -o OUTPUT OPTIONS --report`: its exit code and report."""
    report = output.with_suffix(".report.json")
    result = run_cli("rewrite", model, "-o", output, "--report", report, *options)
    assert result.returncode in (0, 1), f"the CLI failed: {result.stderr}"
    return result.returncode, json.loads(report.read_text())


def assert_same_as_cli(result, python_output: Path, model: Path, *cli_options: str) -> dict:
    """The CLI's rewrite of `model` with `cli_options` wrote the same bytes as the Python rewrite
    (which wrote `python_output`) and reports the same: status, exit code, rules, ops, opset
    changes, notes, the check. Returns the CLI's report."""
    cli_output = python_output.with_name(python_output.stem + "-cli.onnx")
    code, report = cli_rewrite(model, cli_output, *cli_options)
    assert python_output.read_bytes() == cli_output.read_bytes(), "the Python rewrite wrote other bytes than the CLI"
    assert report["status"] == result.status
    assert code == (0 if result.target_met else 1)
    assert {rule["id"]: (rule["matches"], rule["nodes_removed"], rule["nodes_added"]) for rule in report["rules"]} == \
        {rule_id: (s.matches, s.nodes_removed, s.nodes_added) for rule_id, s in result.rules.items()}
    ops = {(op["domain"], op["op_type"]): (op["before"], op["after"]) for op in report["ops"]}
    keys = set(result.ops_before) | set(result.ops_after)
    assert ops == {(display_domain(d), op): (result.ops_before.get((d, op), 0), result.ops_after.get((d, op), 0))
                   for d, op in keys}
    assert {(display_domain(c["domain"])): (c["before"], c["after"]) for c in report["opset_changes"]} == \
        {display_domain(d): change for d, change in result.opset_changes.items()}
    assert report["notes"] == list(result.notes)
    assert report["functions_inlined"] == result.functions_inlined
    assert report["rounds"] == result.rounds
    check = report["check"]
    assert check["ok"] == result.check.ok
    assert [(u["domain"], u["op_type"], u["count"], u["where"], u["reason"]) for u in check["unloadable"]] == \
        [(display_domain(u.domain), u.op_type, u.count, u.where, u.reason) for u in result.check.unloadable]
    assert check["opset_problems"] == list(result.check.opset_problems)
    assert check["notes"] == list(result.check.notes)
    return report


def cli_check(model: Path, *options: str) -> Tuple[int, dict]:
    result = run_cli("check", model, "--json", *options)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def assert_check_same_as_cli(report, model: Path, *options: str) -> None:
    code, cli = cli_check(model, *options)
    assert code == (0 if report.ok else 1)
    result = cli["result"]
    assert result["ok"] == report.ok
    assert [(u["domain"], u["op_type"], u["count"], u["where"], u["reason"]) for u in result["unloadable"]] == \
        [(display_domain(u.domain), u.op_type, u.count, u.where, u.reason) for u in report.unloadable]
    assert result["opset_problems"] == list(report.opset_problems)
    assert result["notes"] == list(report.notes)


def cli_error(*arguments: object) -> Tuple[int, str]:
    """The exit code and the error line (without `onnx-rewrite: error: `) of a failing CLI run."""
    result = run_cli(*arguments)
    prefix = "onnx-rewrite: error: "
    lines = [line for line in result.stderr.splitlines() if line.startswith(prefix)]
    assert result.returncode in (2, 3) and len(lines) == 1, (result.returncode, result.stderr)
    return result.returncode, lines[0][len(prefix):]


@pytest.fixture
def onnx_rewrite():
    import onnx_rewrite as module
    return module
