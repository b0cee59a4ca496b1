"""The package's API: models in every form, results, check, rules, targets, errors, external data
and big models through paths, each held to what the CLI does with the same file."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (SOURCE_DIR, assert_check_same_as_cli, assert_same_as_cli, cli_error, node, require, run, run_cli,
                      tool)

GROUP_NORM = SOURCE_DIR / "testdata" / "mygroupnorm-opset9.onnx"


def helper():
    return require("onnx.helper", "python3-onnx")


def make_model(nodes, inputs, outputs, opsets, initializers=(), functions=(), ir_version=8):
    onnx = require("onnx", "python3-onnx")
    h = onnx.helper
    graph = h.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = h.make_model(graph, opset_imports=[h.make_opsetid(d, v) for d, v in opsets], functions=list(functions))
    model.ir_version = ir_version
    return model


def float_input(name, shape):
    onnx = require("onnx", "python3-onnx")
    return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def inverse_model():
    """Scenario 4's export: com.microsoft::Inverse, which only ONNX Runtime loads."""
    h = helper()
    return make_model([h.make_node("Inverse", ["x"], ["y"], domain="com.microsoft")],
                      [float_input("x", [2, 3, 3])], [float_input("y", [2, 3, 3])], [("", 13), ("com.microsoft", 1)])


def twice_model():
    """A custom op my.Twice (x + x) no built-in rule knows."""
    h = helper()
    return make_model([h.make_node("Twice", ["x"], ["y"], domain="my")], [float_input("x", [4])],
                      [float_input("y", [4])], [("", 17), ("my", 1)])


TWICE_RULE = """
rule my-twice-as-add
  description: my::Twice(x) = x + x
  targets: onnx
  pattern (x) => (y) {
    y = my.Twice (x)
  }
  replace (x) => (y) {
    y = Add (x, x)
  }
  example {
    <ir_version: 8, opset_import: ["": 17, "my": 1]>
    g (float[4] x) => (float[4] y) {
      y = my.Twice (x)
    }
  }
  expect {
    y = Add (x, x)
  }
end
"""


# ---- Input shapes and verification in ONNX Runtime ---------------------------------------------

RELU_TO_ABS = """
rule relu-to-abs
  description: wrong on purpose: Abs differs from Relu for every negative x
  targets: onnx
  pattern (x) => (y) { y = Relu (x) }
  replace (x) => (y) { y = Abs (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Relu (x) }
  }
  expect { y = Abs (x) }
end
"""


RELU_AS_LEAKY_RELU = """
rule relu-as-leaky-relu
  description: the same numbers: LeakyRelu with alpha 0 is Relu
  targets: onnx
  pattern (x) => (y) { y = Relu (x) }
  replace (x) => (y) { y = LeakyRelu <alpha = 0.0> (x) }
  example {
    <ir_version: 8, opset_import: ["": 17]>
    g (float[2] x) => (float[2] y) { y = Relu (x) }
  }
  expect { y = LeakyRelu <alpha = 0.0> (x) }
end
"""


def relu_model(path: Path) -> Path:
    """y = Relu(x), x of dims [N, 3]."""
    onnx = require("onnx", "python3-onnx")
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def test_input_shapes_fix_dims_as_the_clis_input_shape(onnx_rewrite, tmp_path):
    model = relu_model(tmp_path / "relu.onnx")
    result = onnx_rewrite.rewrite(model, rules=RELU_TO_ABS, input_shapes={"x": [4, 3]}, output=tmp_path / "py.onnx")
    dims = [d.dim_value for d in result.model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [4, 3] and [d.dim_value for d in result.model.graph.output[0].type.tensor_type.shape.dim] == [4, 3]
    rules = tmp_path / "wrong.rules"
    rules.write_text(RELU_TO_ABS)
    assert_same_as_cli(result, tmp_path / "py.onnx", model, "--rules", str(rules), "--input-shape", "x=4,3")
    with pytest.raises(onnx_rewrite.UsageError) as error:
        onnx_rewrite.rewrite(model, input_shapes={"x": [4, 3, 1]})
    assert cli_error("rewrite", model, "-o", tmp_path / "no.onnx", "--input-shape", "x=4,3,1") == (2, str(error.value))
    with pytest.raises(TypeError):
        onnx_rewrite.rewrite(model, input_shapes=[4, 3])


def test_verify_catches_a_wrong_rule_and_writes_nothing(onnx_rewrite, tmp_path):
    node()
    model = relu_model(tmp_path / "relu.onnx")
    output = tmp_path / "out.onnx"
    with pytest.raises(onnx_rewrite.VerifyError) as error:
        onnx_rewrite.rewrite(model, rules=RELU_TO_ABS, verify=True, output=output)
    assert not output.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["relu.onnx"]
    assert error.value.exit_code == 4 and error.value.file == str(output)
    assert "computes other numbers than the original" in str(error.value) and "'y'" in str(error.value)
    assert error.value.verification.status == "mismatch" and not error.value.verification.ok
    # The CLI says the same of the same rewrite, and exits 4.
    rules = tmp_path / "wrong.rules"
    rules.write_text(RELU_TO_ABS)
    cli = run_cli("rewrite", model, "-o", output, "--rules", rules, "--verify")
    assert cli.returncode == 4 and not output.exists(), cli.stderr
    assert "computes other numbers than the original" in cli.stderr


def test_verify_of_a_good_rewrite_is_the_clis_verify(onnx_rewrite, tmp_path):
    node()
    model = relu_model(tmp_path / "relu.onnx")
    result = onnx_rewrite.rewrite(model, rules=RELU_AS_LEAKY_RELU, input_shapes={"x": [5, 3]}, verify=True,
                                  output=tmp_path / "out.onnx")
    assert result.rules["relu-as-leaky-relu"].matches == 1
    assert (tmp_path / "out.onnx").exists() and result.verification is not None
    assert result.verification.status == "match" and result.verification.ok
    assert result.verification.inputs[0]["shape"] == [5, 3]
    # verify() on two files, against the CLI's `verify --json`; the tolerance and seed reach it.
    wrong = onnx_rewrite.rewrite(model, rules=RELU_TO_ABS)
    wrong.save(tmp_path / "wrong.onnx")
    verification = onnx_rewrite.verify(model, tmp_path / "wrong.onnx", input_shapes={"x": [5, 3]}, seed=7)
    cli = run_cli("verify", model, tmp_path / "wrong.onnx", "--input-shape", "x=5,3", "--seed", "7", "--json")
    assert cli.returncode == 4
    assert verification.report == json.loads(cli.stdout)["verify"] | {"timing": verification.report["timing"],
                                                                      "seconds": verification.report["seconds"]}
    assert not verification.ok and verification.outputs[0]["max_abs"] > 0
    assert onnx_rewrite.verify(model, tmp_path / "wrong.onnx", atol=10.0).ok
    with pytest.raises(onnx_rewrite.UsageError):
        onnx_rewrite.verify(model, tmp_path / "wrong.onnx", runtime="java")


# ---- Models in, models out ---------------------------------------------------------------------

def test_a_model_proto_bytes_and_a_path_give_the_same_rewrite(onnx_rewrite, tmp_path):
    onnx = require("onnx", "python3-onnx")
    proto = onnx.load(str(GROUP_NORM))
    from_proto = onnx_rewrite.rewrite(proto, target="onnx")
    from_bytes = onnx_rewrite.rewrite(GROUP_NORM.read_bytes(), target="onnx")
    from_path = onnx_rewrite.rewrite(GROUP_NORM, target="onnx")
    from_str = onnx_rewrite.rewrite(str(GROUP_NORM), target="onnx")
    assert from_proto.model_bytes() == from_bytes.model_bytes() == from_path.model_bytes() == from_str.model_bytes()
    result = from_proto
    assert result.status == "rewritten" and result.changed and result.target_met and result.check.ok
    assert result.rules == {"mygroupnorm-decomposition": onnx_rewrite.RuleStats(1, 1, result.rules["mygroupnorm-decomposition"].nodes_added)}
    assert result.rules["mygroupnorm-decomposition"].nodes_added > 1
    assert result.ops_before[("mydomain", "mygroupnorm")] == 1
    assert ("mydomain", "mygroupnorm") not in result.ops_after
    assert result.ops_changed[("mydomain", "mygroupnorm")] == (1, 0)
    assert result.opset_changes == {"mydomain": (1, 0)}
    assert isinstance(result.model, onnx.ModelProto)
    assert result.model is result.model  # made once
    assert not any(n.domain == "mydomain" for n in result.model.graph.node)
    metadata = {p.key: p.value for p in result.model.metadata_props}
    assert metadata["onnx_rewrite.target"] == "onnx"
    assert metadata["onnx_rewrite.rules"] == "mygroupnorm-decomposition:1"
    assert result.output is None
    assert "RewriteResult rewritten" in repr(result)


def test_output_is_written_as_the_cli_writes_it(onnx_rewrite, tmp_path):
    output = tmp_path / "fixed.onnx"
    result = onnx_rewrite.rewrite(GROUP_NORM, target="onnx", output=output)
    assert result.output == str(output)
    assert output.read_bytes() == result.model_bytes()
    assert_same_as_cli(result, output, GROUP_NORM, "--target", "onnx")
    # save() writes the same bytes, through the library's writer.
    again = tmp_path / "again.onnx"
    result.save(again)
    assert again.read_bytes() == output.read_bytes()


def test_without_provenance_as_with_no_provenance(onnx_rewrite, tmp_path):
    output = tmp_path / "plain.onnx"
    result = onnx_rewrite.rewrite(GROUP_NORM, target="ort", output=output, provenance=False)
    assert not any(p.key.startswith("onnx_rewrite.") for p in require("onnx", "python3-onnx").load(str(output)).metadata_props)
    assert_same_as_cli(result, output, GROUP_NORM, "--target", "ort", "--no-provenance")


def test_a_model_no_rule_changes_comes_back_byte_for_byte(onnx_rewrite, tmp_path):
    model = tmp_path / "inverse.onnx"
    model.write_bytes(inverse_model().SerializeToString())
    output = tmp_path / "out.onnx"
    result = onnx_rewrite.rewrite(model, target="ort", output=output)
    assert result.status == "unchanged" and not result.changed and result.rules == {} and result.target_met
    assert output.read_bytes() == model.read_bytes() == result.model_bytes()
    assert_same_as_cli(result, output, model, "--target", "ort")


def test_a_target_not_met_is_a_result_not_an_error(onnx_rewrite, tmp_path):
    model = tmp_path / "inverse.onnx"
    model.write_bytes(inverse_model().SerializeToString())
    output = tmp_path / "out.onnx"
    result = onnx_rewrite.rewrite(model, target="onnx", output=output)
    assert result.status == "target-not-met" and not result.target_met
    assert [(u.domain, u.op_type, u.count, u.where) for u in result.check.unloadable] == \
        [("com.microsoft", "Inverse", 1, "main graph")]
    assert output.is_file()  # written all the same, as the CLI does
    assert_same_as_cli(result, output, model, "--target", "onnx")


def test_opset_and_to_opset(onnx_rewrite, tmp_path):
    output = tmp_path / "raised.onnx"
    result = onnx_rewrite.rewrite(GROUP_NORM, target="onnx", to_opset=21, output=output)
    assert result.opset_changes[""] == (9, 21)
    assert "mygroupnorm-to-group-normalization" in result.rules
    assert result.ops_after[("", "GroupNormalization")] == 1
    assert_same_as_cli(result, output, GROUP_NORM, "--target", "onnx", "--to-opset", "21")
    lowered = onnx_rewrite.rewrite(GROUP_NORM, target="onnx", opset=8, output=tmp_path / "8.onnx")
    assert lowered.target_met and lowered.opset_changes[""] == (9, 8) and lowered.check.max_opset == 8
    assert_same_as_cli(lowered, tmp_path / "8.onnx", GROUP_NORM, "--target", "onnx", "--opset", "8")
    too_low = onnx_rewrite.rewrite(GROUP_NORM, target="onnx", opset=6, output=tmp_path / "6.onnx")
    assert not too_low.target_met and any("IR version 4 kept" in note for note in too_low.notes)
    assert_same_as_cli(too_low, tmp_path / "6.onnx", GROUP_NORM, "--target", "onnx", "--opset", "6")
    with pytest.raises(onnx_rewrite.UsageError, match="exclude each other"):
        onnx_rewrite.rewrite(GROUP_NORM, opset=11, to_opset=11)
    with pytest.raises(onnx_rewrite.UsageError, match="opset=0"):
        onnx_rewrite.rewrite(GROUP_NORM, opset=0)
    with pytest.raises(TypeError):
        onnx_rewrite.rewrite(GROUP_NORM, opset="11")


def test_only_skip_and_explain(onnx_rewrite):
    skipped = onnx_rewrite.rewrite(GROUP_NORM, target="onnx",
                                   skip=["mygroupnorm-decomposition", "mygroupnorm-to-group-normalization"])
    assert skipped.rules == {} and not skipped.target_met
    # Without the decomposition, GroupNormalization-21 serves: the import follows, nothing else
    # in the graph changing meaning at 21.
    raised = onnx_rewrite.rewrite(GROUP_NORM, target="onnx", skip="mygroupnorm-decomposition")
    assert set(raised.rules) == {"mygroupnorm-to-group-normalization"} and raised.target_met
    assert raised.opset_changes[""] == (9, 21)
    only = onnx_rewrite.rewrite(GROUP_NORM, target="onnx", only="mygroupnorm-decomposition")
    assert set(only.rules) == {"mygroupnorm-decomposition"}
    explained = onnx_rewrite.rewrite(GROUP_NORM, target="onnx", explain="mygroupnorm")
    assert "mygroupnorm-decomposition" in explained.explanation
    assert onnx_rewrite.rewrite(GROUP_NORM, target="onnx").explanation == ""


def test_without_onnx_the_model_is_bytes():
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import onnx_rewrite\n"
            f"r = onnx_rewrite.rewrite({str(GROUP_NORM)!r})\n"
            "assert isinstance(r.model, bytes) and r.model == r.model_bytes(), type(r.model)\n"
            "print('bytes')\n")
    result = run([sys.executable, "-c", code])
    assert result.returncode == 0 and result.stdout == "bytes\n", result.stderr


def test_a_model_is_a_proto_bytes_or_a_path(onnx_rewrite):
    with pytest.raises(TypeError, match="not int"):
        onnx_rewrite.rewrite(3)
    with pytest.raises(TypeError):
        onnx_rewrite.check(object())


# ---- check --------------------------------------------------------------------------------------

def test_check_is_the_clis(onnx_rewrite, tmp_path):
    report = onnx_rewrite.check(GROUP_NORM, target="onnx")
    assert not report.ok and report.target == "onnx"
    assert [(u.domain, u.op_type, u.count, u.where) for u in report.unloadable] == [("mydomain", "mygroupnorm", 1, "main graph")]
    assert_check_same_as_cli(report, GROUP_NORM, "--target", "onnx")
    fixed = onnx_rewrite.rewrite(GROUP_NORM, target="onnx")
    assert onnx_rewrite.check(fixed.model, target="onnx").ok
    assert onnx_rewrite.check(fixed.model_bytes()).ok
    capped = onnx_rewrite.check(GROUP_NORM, target="ort", opset=8)
    assert not capped.ok and capped.opset_problems and capped.max_opset == 8
    assert_check_same_as_cli(capped, GROUP_NORM, "--target", "ort", "--opset", "8")


def test_check_reads_no_weights_and_notes_missing_ones(onnx_rewrite, tmp_path):
    onnx = require("onnx", "python3-onnx")
    model = external_data_model(tmp_path / "graph-only")
    (model.parent / "weights.bin").unlink()
    report = onnx_rewrite.check(model, target="onnx")
    assert any("weights.bin" in note and "missing" in note for note in report.notes), report.notes
    assert_check_same_as_cli(report, model, "--target", "onnx")
    with pytest.raises(onnx_rewrite.InputError, match="weights.bin"):
        onnx_rewrite.rewrite(model)
    assert onnx  # imported for the model's construction


# ---- Errors: the CLI's messages -----------------------------------------------------------------

def assert_cli_says(error, *cli_arguments):
    code, line = cli_error(*cli_arguments)
    assert str(error) == line
    assert error.exit_code == code


def test_a_missing_model_is_an_input_error_naming_it(onnx_rewrite, tmp_path):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(onnx_rewrite.InputError) as caught:
        onnx_rewrite.rewrite(missing, output=tmp_path / "out.onnx")
    assert caught.value.file == str(missing)
    assert isinstance(caught.value, onnx_rewrite.Error)
    assert_cli_says(caught.value, "rewrite", missing, "-o", tmp_path / "out.onnx")
    with pytest.raises(onnx_rewrite.InputError) as checked:
        onnx_rewrite.check(missing)
    assert_cli_says(checked.value, "check", missing)


def test_bytes_that_are_no_model(onnx_rewrite, tmp_path):
    with pytest.raises(onnx_rewrite.InputError) as caught:
        onnx_rewrite.rewrite(b"\x08\x07 not a model")
    assert caught.value.file == "<bytes>"
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07 not a model")
    _, line = cli_error("rewrite", junk, "-o", tmp_path / "out.onnx")
    assert line == f"{junk}: {caught.value.message}"


def test_usage_errors_are_the_clis(onnx_rewrite, tmp_path):
    with pytest.raises(onnx_rewrite.UsageError) as target:
        onnx_rewrite.rewrite(GROUP_NORM, target="no-such-runtime")
    assert target.value.file is None
    assert_cli_says(target.value, "rewrite", GROUP_NORM, "-o", tmp_path / "o.onnx", "--target", "no-such-runtime")
    with pytest.raises(onnx_rewrite.UsageError) as rule:
        onnx_rewrite.rewrite(GROUP_NORM, only=["no-such-rule"])
    assert_cli_says(rule.value, "rewrite", GROUP_NORM, "-o", tmp_path / "o.onnx", "--only", "no-such-rule")
    directory = tmp_path / "nowhere" / "out.onnx"
    with pytest.raises(onnx_rewrite.UsageError) as output:
        onnx_rewrite.rewrite(GROUP_NORM, output=directory)
    assert_cli_says(output.value, "rewrite", GROUP_NORM, "-o", directory)
    with pytest.raises(onnx_rewrite.UsageError) as check_target:
        onnx_rewrite.check(GROUP_NORM, target="no-such-runtime")
    assert_cli_says(check_target.value, "check", GROUP_NORM, "--target", "no-such-runtime")
    # The target is looked at before the model, as by the CLI.
    with pytest.raises(onnx_rewrite.UsageError):
        onnx_rewrite.rewrite(tmp_path / "missing.onnx", target="no-such-runtime")


def test_the_output_never_replaces_the_input_nor_its_weights(onnx_rewrite, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(GROUP_NORM.read_bytes())
    with pytest.raises(onnx_rewrite.UsageError) as caught:
        onnx_rewrite.rewrite(model, output=model)
    assert str(caught.value) == f"{model}: refusing to overwrite the input (use --in-place)"
    assert model.read_bytes() == GROUP_NORM.read_bytes()
    external = external_data_model(tmp_path / "external")
    weights = external.parent / "weights.bin"
    data = weights.read_bytes()
    with pytest.raises(onnx_rewrite.UsageError) as caught:
        onnx_rewrite.rewrite(external, output=weights)
    assert str(caught.value) == f"{weights}: refusing to overwrite the external data file 'weights.bin' the model reads its weights from"
    assert weights.read_bytes() == data
    result = onnx_rewrite.rewrite(external)
    with pytest.raises(onnx_rewrite.UsageError):
        result.save(weights)
    assert weights.read_bytes() == data


def test_a_graph_a_runtime_refuses_is_bad_input(onnx_rewrite, tmp_path):
    h = helper()
    cycle = make_model([h.make_node("Relu", ["b"], ["a"]), h.make_node("Relu", ["a"], ["b"])], [float_input("x", [1])],
                       [float_input("b", [1])], [("", 17)])
    path = tmp_path / "cycle.onnx"
    path.write_bytes(cycle.SerializeToString())
    with pytest.raises(onnx_rewrite.InputError) as caught:
        onnx_rewrite.rewrite(path, output=tmp_path / "out.onnx")
    assert_cli_says(caught.value, "rewrite", path, "-o", tmp_path / "out.onnx")
    with pytest.raises(onnx_rewrite.InputError) as checked:
        onnx_rewrite.check(path)
    assert_cli_says(checked.value, "check", path)


def test_control_characters_are_written_as_the_cli_writes_them(onnx_rewrite):
    error = onnx_rewrite.InputError("bad\nname", "dir/a\x01b.onnx")
    assert str(error) == "dir/a\\x01b.onnx: bad\\x0aname"
    assert error.message == "bad\nname" and error.file == "dir/a\x01b.onnx"
    assert str(onnx_rewrite.UsageError("x\ty")) == "x\\x09y"


# ---- Rules ---------------------------------------------------------------------------------------

def test_rules_from_text_and_files(onnx_rewrite, tmp_path):
    rules = onnx_rewrite.load_rules(TWICE_RULE)
    assert len(rules) == 1 and rules.ids == ("my-twice-as-add",) and "my-twice-as-add" in rules
    (rule,) = list(rules)
    assert rule.targets == ("onnx",) and rule.matches == (("my", "Twice"),) and rule.file == "<rules>"
    rule_file = tmp_path / "twice.rules"
    rule_file.write_text(TWICE_RULE)
    from_file = onnx_rewrite.load_rules(rule_file)
    assert from_file.ids == rules.ids and list(from_file)[0].file == str(rule_file)
    assert onnx_rewrite.load_rules(tmp_path).ids == rules.ids  # a directory of .rules files

    model = tmp_path / "twice.onnx"
    model.write_bytes(twice_model().SerializeToString())
    for given in (rules, rule_file, str(rule_file), TWICE_RULE, [rule_file]):
        result = onnx_rewrite.rewrite(model, rules=given)
        assert result.rules == {"my-twice-as-add": onnx_rewrite.RuleStats(1, 1, 1)}, given
        assert result.target_met
    output = tmp_path / "out.onnx"
    result = onnx_rewrite.rewrite(model, rules=rule_file, output=output)
    assert_same_as_cli(result, output, model, "--rules", str(rule_file))
    alone = onnx_rewrite.rewrite(model, rules=rules, builtin_rules=False)
    assert set(alone.rules) == {"my-twice-as-add"}
    assert not onnx_rewrite.rewrite(model).target_met  # the built-in rules alone don't know my.Twice


def test_rule_sets_combine_and_refuse_an_id_twice(onnx_rewrite):
    builtin = onnx_rewrite.builtin_rules()
    assert len(builtin) > 50 and "mygroupnorm-decomposition" in builtin
    mine = onnx_rewrite.load_rules(TWICE_RULE)
    both = builtin + mine
    assert len(both) == len(builtin) + 1 and "my-twice-as-add" in both
    with pytest.raises(onnx_rewrite.InputError, match="my-twice-as-add"):
        mine + onnx_rewrite.load_rules(TWICE_RULE, name="again.rules")
    with pytest.raises(onnx_rewrite.InputError):
        onnx_rewrite.rewrite(GROUP_NORM, rules=[mine, TWICE_RULE])


def test_a_broken_rule_file_is_the_clis_error(onnx_rewrite, tmp_path):
    broken = tmp_path / "broken.rules"
    broken.write_text(TWICE_RULE.replace("replace (x) => (y)", "replace (x) => (z)"))
    with pytest.raises(onnx_rewrite.InputError) as caught:
        onnx_rewrite.load_rules(broken)
    assert caught.value.file.startswith(f"{broken}:")
    assert_cli_says(caught.value, "rewrite", GROUP_NORM, "-o", tmp_path / "o.onnx", "--rules", broken)
    with pytest.raises(onnx_rewrite.InputError) as missing:
        onnx_rewrite.load_rules(tmp_path / "none.rules")
    assert_cli_says(missing.value, "rewrite", GROUP_NORM, "-o", tmp_path / "o.onnx", "--rules", tmp_path / "none.rules")


# ---- Targets ---------------------------------------------------------------------------------------

def test_targets_are_the_clis(onnx_rewrite):
    import json
    listed = json.loads(run_cli("targets", "--json").stdout)
    targets = onnx_rewrite.targets()
    assert [t.name for t in targets] == [t["name"] for t in listed]
    for ours, theirs in zip(targets, listed):
        assert ours.description == theirs["description"]
        assert list(ours.builds_on) == theirs["builds_on"]
        assert ours.local_functions == theirs["local_functions"]
        assert ours.load_tested == theirs["load_tested"]
        assert ours.source == theirs["source"] and ours.file == theirs["file"]
    by_name = {t.name: t for t in targets}
    assert {"onnx", "ort", "tensorrt", "openvino"} <= set(by_name)
    assert by_name["ort"].local_functions and "com.microsoft" in by_name["ort"].domains
    assert by_name["onnx-opset13"].max_opsets == {"": 13}


def test_a_target_file(onnx_rewrite, tmp_path):
    target = tmp_path / "mini.target"
    target.write_text((SOURCE_DIR / "targets" / "onnx-opset13.target").read_text())
    # The same file under another name builds a target of that name, as --target PATH does.
    result = onnx_rewrite.rewrite(GROUP_NORM, target=target)
    assert result.check.target == "mini" and result.target_met


# ---- External data and big models: through paths, never through Python ---------------------------

def external_data_model(directory: Path) -> Path:
    """A model whose weights are in weights.bin beside it: Conv -> mygroupnorm, as onnx.save writes it."""
    onnx = require("onnx", "python3-onnx")
    numpy = require("numpy", "python3-numpy")
    require("onnx.numpy_helper", "python3-onnx")
    h = onnx.helper
    rng = numpy.random.default_rng(0)
    weights = [
        onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(numpy.float32), "w"),
        onnx.numpy_helper.from_array(numpy.array([2.0], numpy.float32), "groups"),
        onnx.numpy_helper.from_array(rng.standard_normal(4).astype(numpy.float32), "scale"),
        onnx.numpy_helper.from_array(rng.standard_normal(4).astype(numpy.float32), "bias"),
    ]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"]),
             h.make_node("mygroupnorm", ["c", "groups", "scale", "bias"], ["y"], domain="mydomain", epsilon=1e-5)]
    model = make_model(nodes, [float_input("x", [1, 3, 8, 8])], [float_input("y", [1, 4, 6, 6])],
                       [("", 13), ("mydomain", 1)], weights)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
              size_threshold=0)
    return path


def test_external_data_goes_through_paths(onnx_rewrite, tmp_path):
    onnx = require("onnx", "python3-onnx")
    model = external_data_model(tmp_path / "in")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    output = out_dir / "fixed.onnx"
    result = onnx_rewrite.rewrite(model, target="onnx", output=output)
    assert result.target_met and (out_dir / "weights.bin").read_bytes() == (model.parent / "weights.bin").read_bytes()
    assert_same_as_cli(result, output, model, "--target", "onnx")
    # The model as Python sees it keeps the references: weights stay in their file.
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in result.model.graph.initializer if t.name == "w")
    # A model in memory has no directory to find external data in: refused, the library says why.
    graph_only = onnx.load(str(model), load_external_data=False)
    with pytest.raises(onnx_rewrite.InputError) as caught:
        onnx_rewrite.rewrite(graph_only)
    assert caught.value.file == "<ModelProto>" and "external data, which needs a file on disk" in caught.value.message
    # Loaded with its weights, it is an ordinary model in memory.
    assert onnx_rewrite.rewrite(onnx.load(str(model))).target_met


BIG_MODEL_SCRIPT = r"""
import resource, sys
import onnx, onnx_rewrite
from onnx import helper as h, TensorProto
directory, elements = sys.argv[1], int(sys.argv[2])
weight = h.make_tensor_value_info("w", TensorProto.FLOAT, [elements])
w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[elements], data_location=TensorProto.EXTERNAL)
for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(elements * 4))):
    w.external_data.add(key=key, value=value)
graph = h.make_graph([h.make_node("CustomOpOne", ["x", "w"], ["y"], domain="test.customop")], "big",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [elements])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [elements])], initializer=[w])
model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("test.customop", 1)])
model.ir_version = 8
with open(f"{directory}/big.onnx", "wb") as f:
    f.write(model.SerializeToString())
with open(f"{directory}/w.bin", "wb") as f:
    f.truncate(elements * 4)  # sparse: no byte of it is ever written or read
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = onnx_rewrite.rewrite(f"{directory}/big.onnx", target="onnx", output=f"{directory}/fixed.onnx")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(result.status, result.rules["customop-one-to-add"].matches, (after - before) // 1024)
"""


def test_a_model_over_2_gb_is_rewritten_through_its_path_without_reading_its_weights(onnx_rewrite, tmp_path):
    require("onnx", "python3-onnx")
    elements = 3 * 2**30 // 4  # 3 GiB of weights
    result = run([sys.executable, "-c", BIG_MODEL_SCRIPT, tmp_path, elements])
    assert result.returncode == 0, result.stderr
    status, matches, grown_mb = result.stdout.split()
    assert (status, matches) == ("rewritten", "1")
    assert int(grown_mb) < 100, f"the rewrite grew the process by {grown_mb} MB: weights went through memory"
    # Written beside its weights, which it still names, and as the CLI writes it.
    assert (tmp_path / "w.bin").stat().st_blocks == 0  # still sparse: never written to
    assert run_cli("check", tmp_path / "fixed.onnx", "--target", "onnx").returncode == 0
    cli = run_cli("rewrite", tmp_path / "big.onnx", "-o", tmp_path / "fixed-cli.onnx", "--target", "onnx")
    assert cli.returncode == 0, cli.stderr
    assert (tmp_path / "fixed.onnx").read_bytes() == (tmp_path / "fixed-cli.onnx").read_bytes()


# ---- The process around the library ------------------------------------------------------------

def test_writing_leaves_pythons_ctrl_c_alone(tmp_path):
    # Where the file system has no unnamed files, the library writes hidden temporary files and
    # removes them on SIGINT, but only where the program has no handler of its own: in Python,
    # Ctrl-C stays a KeyboardInterrupt after a model was written. The shim of the C++ tests
    # (tests/support/no_unnamed_files.cc) takes unnamed files away, and logs that it did.
    shim = tool("NO_UNNAMED_FILES_LIBRARY", "tests/libno_unnamed_files.so")
    log = tmp_path / "shim.log"
    code = ("import os, signal, onnx_rewrite\n"
            f"onnx_rewrite.rewrite({str(GROUP_NORM)!r}, output={str(tmp_path / 'out.onnx')!r})\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    import time; time.sleep(1)\n"
            "except KeyboardInterrupt:\n"
            "    print('KeyboardInterrupt')\n")
    environment = dict(os.environ, LD_PRELOAD=str(shim), NO_UNNAMED_FILES_LOG=str(log))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment)
    assert "x" in log.read_text(), "the shim did not take unnamed files away: the test proves nothing"
    assert result.returncode == 0 and result.stdout == "KeyboardInterrupt\n", (result.returncode, result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx", "shim.log"]  # no temporary file left


def test_the_version_is_the_tools(onnx_rewrite):
    assert run_cli("--version").stdout.strip() == f"onnx-rewrite {onnx_rewrite.__version__}"


SIMPLIFIABLE = """<ir_version: 8, opset_import: ["": 17]>
g (float[3] x) => (float[3] y) {
  k = Constant <value = float[3] {1.0, 2.0, 3.0}> ()
  a = Identity (x)
  y = Mul (a, k)
}"""


def test_simplify_is_the_clis_with_the_targets_default(onnx_rewrite, tmp_path):
    require("onnx", "python3-onnx")
    from onnx import parser  # a submodule onnx does not import itself
    model = tmp_path / "simplifiable.onnx"
    model.write_bytes(parser.parse_model(SIMPLIFIABLE).SerializeToString())
    for target, simplify, cli_options, ops in [("onnx", None, (), ["Constant", "Identity", "Mul"]),
                                               ("onnx", True, ("--simplify",), ["Mul"]),
                                               ("ort", None, (), ["Mul"]),
                                               ("ort", False, ("--no-simplify",), ["Constant", "Identity", "Mul"])]:
        output = tmp_path / f"{target}-{simplify}.onnx"
        result = onnx_rewrite.rewrite(model, target=target, simplify=simplify, output=output)
        assert [node.op_type for node in result.model.graph.node] == ops, (target, simplify)
        assert_same_as_cli(result, output, model, "--target", target, *cli_options)
