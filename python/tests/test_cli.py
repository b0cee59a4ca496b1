"""`python3 -m onnx_rewrite ...` is the command line: the same output, files and exit codes as the
tool, for a rewrite, a check that fails, bad input and usage errors."""

import sys

from conftest import SOURCE_DIR, run, run_cli

GROUP_NORM = SOURCE_DIR / "testdata" / "mygroupnorm-opset9.onnx"


def module(*arguments):
    return run([sys.executable, "-m", "onnx_rewrite", *arguments])


def assert_same_run(python, tool):
    assert (python.returncode, python.stdout, python.stderr) == (tool.returncode, tool.stdout, tool.stderr)


def test_version_and_help():
    assert_same_run(module("--version"), run_cli("--version"))
    assert module("--version").stdout.startswith("onnx-rewrite ")
    assert_same_run(module("rewrite", "--help"), run_cli("rewrite", "--help"))


def test_rewrite_writes_what_the_tool_writes(tmp_path):
    python = module("rewrite", GROUP_NORM, "-o", tmp_path / "out.onnx", "--target", "onnx")
    tool = run_cli("rewrite", GROUP_NORM, "-o", tmp_path / "out-tool.onnx", "--target", "onnx")
    assert python.returncode == 0, python.stderr
    assert python.stdout == tool.stdout.replace("out-tool.onnx", "out.onnx")
    assert "rule mygroupnorm-decomposition: 1 match" in python.stdout
    assert (tmp_path / "out.onnx").read_bytes() == (tmp_path / "out-tool.onnx").read_bytes()
    assert_same_run(module("check", tmp_path / "out.onnx"), run_cli("check", tmp_path / "out.onnx"))


def test_exit_codes_and_errors_are_the_tools(tmp_path):
    unmet = module("check", GROUP_NORM, "--target", "onnx")
    assert unmet.returncode == 1
    assert_same_run(unmet, run_cli("check", GROUP_NORM, "--target", "onnx"))
    missing = module("check", tmp_path / "missing.onnx")
    assert missing.returncode == 3 and missing.stderr.startswith("onnx-rewrite: error: ")
    assert_same_run(missing, run_cli("check", tmp_path / "missing.onnx"))
    usage = module("frobnicate")
    assert usage.returncode == 2
    assert_same_run(usage, run_cli("frobnicate"))
    no_output = module("rewrite", GROUP_NORM)
    assert no_output.returncode == 2
    assert_same_run(no_output, run_cli("rewrite", GROUP_NORM))


def test_json_output_is_the_tools():
    assert_same_run(module("targets", "--json"), run_cli("targets", "--json"))
    assert_same_run(module("inspect", GROUP_NORM, "--json"), run_cli("inspect", GROUP_NORM, "--json"))
