"""The seed scenarios (docs/python.md, "The seed scenarios from Python"), end to end as a user's
export script runs them: export the model with PyTorch (or build it with onnx.helper where the
exporter needs a newer torch), rewrite it with onnx_rewrite, check it, run it in ONNX Runtime
through the suite's harness against PyTorch's or numpy's own numbers, and hold the rewrite to the
CLI's on the same file (the same bytes written, the same report).
"""

import math

import pytest

from conftest import assert_check_same_as_cli, assert_same_as_cli, ort_against, ort_compare, require


def torch_modules():
    torch = require("torch", "python3-torch")
    require("onnx", "python3-onnx")  # torch.onnx.export checks what it writes with onnx
    return torch


def onnx_modules():
    onnx = require("onnx", "python3-onnx")
    numpy = require("numpy", "python3-numpy")
    return onnx, numpy


def assert_ort_matches(outcome):
    assert outcome["status"] == "pass", outcome


# ---- 1. mynamespace::custom_group_norm -> mydomain::mygroupnorm (ONNX Runtime's custom-op tutorial) ---

_custom_group_norm = {}


def define_custom_group_norm():
    """The tutorial's TorchScript op, defined in Python (torch 1.13: torch.library), and its symbolic
    registered at opset 9, emitting mydomain::mygroupnorm with a float attribute epsilon."""
    if _custom_group_norm:
        return
    torch = torch_modules()
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args

    library = torch.library.Library("mynamespace", "DEF")
    library.define("custom_group_norm(Tensor X, Tensor num_groups, Tensor scale, Tensor bias, float eps) -> Tensor")
    library.impl("custom_group_norm",
                 lambda X, num_groups, scale, bias, eps: torch.nn.functional.group_norm(X, int(num_groups.item()), scale, bias, eps),
                 "CPU")

    @parse_args("v", "v", "v", "v", "f")
    def symbolic(g, input, num_groups, scale, bias, eps):
        return g.op("mydomain::mygroupnorm", input, num_groups, scale, bias, epsilon_f=eps)

    register_custom_op_symbolic("mynamespace::custom_group_norm", symbolic, 9)
    _custom_group_norm["library"] = library


def test_1_custom_group_norm(onnx_rewrite, tmp_path):
    torch = torch_modules()
    define_custom_group_norm()

    class CustomGroupNorm(torch.nn.Module):
        def forward(self, x, num_groups, scale, bias):
            return torch.ops.mynamespace.custom_group_norm(x, num_groups, scale, bias, 0.0)

    torch.manual_seed(0)
    inputs = (torch.randn(3, 4, 2, 3), torch.tensor([2.0]), torch.rand(4) + 0.5, torch.randn(4))
    exported = tmp_path / "custom_group_norm.onnx"
    torch.onnx.export(CustomGroupNorm(), inputs, str(exported), opset_version=9, input_names=["X", "num_groups", "scale", "bias"],
                      output_names=["Y"], custom_opsets={"mydomain": 1})
    expected = CustomGroupNorm()(*inputs)

    before = onnx_rewrite.check(exported, target="onnx")
    assert [(u.domain, u.op_type) for u in before.unloadable] == [("mydomain", "mygroupnorm")]
    assert_check_same_as_cli(before, exported, "--target", "onnx")

    output = tmp_path / "fixed.onnx"
    result = onnx_rewrite.rewrite(exported, target="onnx", output=output)
    assert result.target_met and set(result.rules) == {"mygroupnorm-decomposition"}
    assert result.opset_changes.get("", (9, 9))[1] == 9  # the export's opset 9 is kept
    assert onnx_rewrite.check(output, target="onnx").ok
    assert_same_as_cli(result, output, exported, "--target", "onnx")
    assert_ort_matches(ort_against(output, [t.numpy() for t in inputs], [expected.numpy()], tmp_path))


# ---- 2. torchvision::deform_conv2d with the deployment tutorial's placeholder symbolic ----------

def test_2_deform_conv2d_placeholder(onnx_rewrite, tmp_path):
    torch = torch_modules()
    torchvision = require("torchvision", "python3-torchvision")
    from torch.onnx import register_custom_op_symbolic
    from torch.onnx.symbolic_helper import parse_args

    @parse_args("v", "v", "v", "v", "v", "i", "i", "i", "i", "i", "i", "i", "i", "none")
    def symbolic(g, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                 groups, offset_groups, use_mask):
        return g.op("custom::deform_conv2d", input, weight, offset)

    register_custom_op_symbolic("torchvision::deform_conv2d", symbolic, 9)

    class DeformConv(torch.nn.Module):
        def forward(self, input, offset, weight):
            return torchvision.ops.deform_conv2d(input, offset, weight)

    torch.manual_seed(0)
    inputs = (torch.rand(4, 3, 10, 10), torch.randn(4, 18, 8, 8), torch.rand(5, 3, 3, 3))
    exported = tmp_path / "deform_conv2d.onnx"
    torch.onnx.export(DeformConv(), inputs, str(exported), opset_version=9, input_names=["input", "offset", "weight"],
                      output_names=["output"], custom_opsets={"custom": 1})
    expected = DeformConv()(*inputs)
    onnx = require("onnx", "python3-onnx")
    assert [(n.domain, n.op_type, len(n.input)) for n in onnx.load(str(exported)).graph.node] == \
        [("custom", "deform_conv2d", 3)]

    before = onnx_rewrite.check(exported, target="onnx")
    assert not before.ok and before.unloadable[0].op_type == "deform_conv2d"
    assert_check_same_as_cli(before, exported, "--target", "onnx")

    for target in ("onnx", "ort"):
        output = tmp_path / f"fixed-{target}.onnx"
        result = onnx_rewrite.rewrite(exported, target=target, output=output)
        assert result.target_met, result.check.unloadable
        assert ("custom", "deform_conv2d") not in result.ops_after
        assert onnx_rewrite.check(output, target=target).ok
        assert_same_as_cli(result, output, exported, "--target", target)
        assert_ort_matches(ort_against(output, [t.numpy() for t in inputs], [expected.numpy()], tmp_path, atol=1e-4))


# ---- 3. the onnxscript Selu function (aten::selu at opset 14), built with onnx.helper -------------

def onnxscript_selu_model(model_opset=14):
    """What torch.onnx.export(..., opset_version=14, custom_opsets={"custom-onnx-script": 1}) writes
    for aten::selu registered to the onnxscript function Selu written with onnxscript's opset-14
    module: its body uses CastLike, which opset 14 does not have (docs/seed-scenarios.md). The
    torch.onnx docs export the same function at opset_version=15 (model_opset=15)."""
    onnx, _ = onnx_modules()
    h = onnx.helper
    body = [
        h.make_node("Constant", [], ["alpha"], value_float=1.67326),
        h.make_node("Constant", [], ["gamma"], value_float=1.0507),
        h.make_node("CastLike", ["alpha", "X"], ["alphaX"]),
        h.make_node("CastLike", ["gamma", "X"], ["gammaX"]),
        h.make_node("Exp", ["X"], ["expX"]),
        h.make_node("Mul", ["alphaX", "expX"], ["alpha_expX"]),
        h.make_node("Sub", ["alpha_expX", "alphaX"], ["shifted"]),
        h.make_node("Mul", ["gammaX", "shifted"], ["neg"]),
        h.make_node("Mul", ["gammaX", "X"], ["pos"]),
        h.make_node("Constant", [], ["zero_int"], value_int=0),
        h.make_node("CastLike", ["zero_int", "X"], ["zero"]),
        h.make_node("LessOrEqual", ["X", "zero"], ["negative"]),
        h.make_node("Where", ["negative", "neg", "pos"], ["return_val"]),
    ]
    selu = h.make_function("custom-onnx-script", "Selu", ["X"], ["return_val"], body, [h.make_opsetid("", 14)])
    graph = h.make_graph([h.make_node("Selu", ["input"], ["output"], domain="custom-onnx-script")], "torch_jit",
                         [h.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["batch", 3, 4])],
                         [h.make_tensor_value_info("output", onnx.TensorProto.FLOAT, ["batch", 3, 4])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", model_opset), h.make_opsetid("custom-onnx-script", 1)],
                         functions=[selu], producer_name="pytorch", producer_version="1.13.1")
    model.ir_version = 8
    return model


def selu_data():
    _, numpy = onnx_modules()
    x = numpy.random.default_rng(0).uniform(-3, 3, (2, 3, 4)).astype(numpy.float32)
    return x, (1.0507 * numpy.where(x <= 0, 1.67326 * numpy.exp(x) - 1.67326, x)).astype(numpy.float32)


def test_3_onnxscript_selu_exported_at_opset_14(onnx_rewrite, tmp_path):
    onnx, _ = onnx_modules()
    x, reference = selu_data()
    exported = tmp_path / "selu.onnx"
    onnx.save(onnxscript_selu_model(14), str(exported))

    # Neither runtime loads the export: ONNX Runtime reads the body at the model's opset 14.
    for target in ("onnx", "ort"):
        before = onnx_rewrite.check(exported, target=target)
        assert not before.ok
        assert_check_same_as_cli(before, exported, "--target", target)
    assert any(u.op_type == "CastLike" for u in onnx_rewrite.check(exported, target="ort").unloadable)

    # One step is not enough for a plain runtime: the body's import is mended, but it can't be
    # inlined into a model at 14 (a note says why), the same as the CLI.
    output = tmp_path / "selu-onnx.onnx"
    stuck = onnx_rewrite.rewrite(exported, target="onnx", output=output)
    assert not stuck.target_met and stuck.functions_inlined == 0
    assert any("raised to 15" in note for note in stuck.notes) and any("not inlined" in note for note in stuck.notes)
    assert_same_as_cli(stuck, output, exported, "--target", "onnx")

    # For ONNX Runtime, to opset 15: the function's import and the model's are raised.
    output = tmp_path / "selu-ort.onnx"
    for_ort = onnx_rewrite.rewrite(exported, target="ort", to_opset=15, output=output)
    assert for_ort.target_met and for_ort.opset_changes[""] == (14, 15)
    assert [f.name for f in for_ort.model.functions] == ["Selu"]
    assert_same_as_cli(for_ort, output, exported, "--target", "ort", "--to-opset", "15")
    assert_ort_matches(ort_against(output, [x], [reference], tmp_path))

    # Then for a plain runtime: the call inlined.
    output = tmp_path / "selu-plain.onnx"
    plain = onnx_rewrite.rewrite(for_ort.model, target="onnx")
    plain.save(output)
    assert plain.target_met and plain.functions_inlined == 1
    assert not plain.model.functions and all(n.domain == "" for n in plain.model.graph.node)
    assert onnx_rewrite.check(plain.model, target="onnx").ok
    assert_same_as_cli(plain, output, tmp_path / "selu-ort.onnx", "--target", "onnx")
    assert_ort_matches(ort_against(output, [x], [reference], tmp_path))


def test_3_onnxscript_selu_exported_at_opset_15(onnx_rewrite, tmp_path):
    onnx, _ = onnx_modules()
    x, reference = selu_data()
    model = onnxscript_selu_model(15)
    exported = tmp_path / "selu15.onnx"
    onnx.save(model, str(exported))
    assert not onnx_rewrite.check(model, target="onnx").ok  # a call plain runtimes don't run

    output = tmp_path / "selu15-onnx.onnx"
    result = onnx_rewrite.rewrite(model, target="onnx")  # the ModelProto itself, as an export script has it
    result.save(output)
    assert result.target_met and result.functions_inlined == 1
    assert any("CastLike" in note and "raised to 15" in note for note in result.notes), result.notes
    assert_same_as_cli(result, output, exported, "--target", "onnx")
    assert_ort_matches(ort_against(output, [x], [reference], tmp_path))

    output = tmp_path / "selu15-ort.onnx"
    result = onnx_rewrite.rewrite(exported, target="ort", output=output)
    assert result.target_met and result.functions_inlined == 0 and [f.name for f in result.model.functions] == ["Selu"]
    assert_same_as_cli(result, output, exported, "--target", "ort")
    assert_ort_matches(ort_against(output, [x], [reference], tmp_path))


# ---- 4. torch.inverse exported to ONNX Runtime's com.microsoft::Inverse -------------------------

def test_4_inverse_contrib_op(onnx_rewrite, tmp_path):
    torch = torch_modules()
    from torch.onnx import register_custom_op_symbolic

    def inverse(g, self):
        return g.op("com.microsoft::Inverse", self)

    register_custom_op_symbolic("::inverse", inverse, 1)
    register_custom_op_symbolic("::linalg_inv", inverse, 1)  # torch 1.13 traces torch.inverse to it

    class Inverse(torch.nn.Module):
        def forward(self, x):
            return torch.inverse(x)

    torch.manual_seed(0)
    x = torch.randn(2, 3, 3) + 4 * torch.eye(3)  # well conditioned
    exported = tmp_path / "inverse.onnx"
    torch.onnx.export(Inverse(), (x,), str(exported), input_names=["x"], output_names=["y"],
                      custom_opsets={"com.microsoft": 1})
    numpy = require("numpy", "python3-numpy")
    expected = numpy.linalg.inv(x.numpy()).astype(numpy.float32)

    # Only ONNX Runtime runs it: a plain runtime can't, and no rule makes standard ops of it.
    plain = onnx_rewrite.check(exported, target="onnx")
    assert [(u.domain, u.op_type) for u in plain.unloadable] == [("com.microsoft", "Inverse")]
    assert_check_same_as_cli(plain, exported, "--target", "onnx")
    not_met = onnx_rewrite.rewrite(exported, target="onnx", output=tmp_path / "onnx.onnx")
    assert not not_met.target_met and not_met.status == "target-not-met"
    assert_same_as_cli(not_met, tmp_path / "onnx.onnx", exported, "--target", "onnx")

    assert onnx_rewrite.check(exported, target="ort").ok
    output = tmp_path / "ort.onnx"
    result = onnx_rewrite.rewrite(exported, target="ort", output=output)
    assert result.status == "unchanged" and output.read_bytes() == exported.read_bytes()
    assert_same_as_cli(result, output, exported, "--target", "ort")
    assert_ort_matches(ort_against(output, [x.numpy()], [expected], tmp_path))


# ---- 5. dynamo exports with onnxscript functions, built with onnx.helper -------------------------

def gelu_function_model():
    """aten::gelu registered to an onnxscript function that calls com.microsoft::Gelu (PyTorch's
    dynamo custom-op tutorial): the model calls the model-local function, opset 18."""
    onnx, _ = onnx_modules()
    h = onnx.helper
    gelu = h.make_function("custom.aten", "custom_aten_gelu", ["self"], ["return_val"],
                           [h.make_node("Gelu", ["self"], ["return_val"], domain="com.microsoft")],
                           [h.make_opsetid("", 18), h.make_opsetid("com.microsoft", 1)], attributes=["approximate"])
    graph = h.make_graph([h.make_node("custom_aten_gelu", ["l_x_"], ["custom_aten_gelu_0"], domain="custom.aten",
                                      approximate="none")], "main_graph",
                         [h.make_tensor_value_info("l_x_", onnx.TensorProto.FLOAT, [3, 8])],
                         [h.make_tensor_value_info("custom_aten_gelu_0", onnx.TensorProto.FLOAT, [3, 8])])
    model = h.make_model(graph, functions=[gelu], producer_name="pytorch", producer_version="2.1.0",
                         opset_imports=[h.make_opsetid("", 18), h.make_opsetid("custom.aten", 1),
                                        h.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def addandround_function_model():
    """The registry tutorial's custom_addandround: CustomOpOne (= Add) then CustomOpTwo (= Round)
    and a Cast to float, an onnxscript function in domain test.customop, opset 18."""
    onnx, _ = onnx_modules()
    h = onnx.helper
    body = [h.make_node("CustomOpOne", ["input_x", "input_x"], ["add_x"], domain="test.customop"),
            h.make_node("CustomOpTwo", ["add_x"], ["round_x"], domain="test.customop"),
            h.make_node("Cast", ["round_x"], ["return_val"], to=onnx.TensorProto.FLOAT)]
    function = h.make_function("test.customop", "custom_addandround", ["input_x"], ["return_val"], body,
                               [h.make_opsetid("", 18), h.make_opsetid("test.customop", 1)])
    graph = h.make_graph([h.make_node("custom_addandround", ["l_tensor_x_"], ["custom_addandround_0"],
                                      domain="test.customop")], "main_graph",
                         [h.make_tensor_value_info("l_tensor_x_", onnx.TensorProto.FLOAT, [16])],
                         [h.make_tensor_value_info("custom_addandround_0", onnx.TensorProto.FLOAT, [16])])
    model = h.make_model(graph, functions=[function], producer_name="pytorch", producer_version="2.1.0",
                         opset_imports=[h.make_opsetid("", 18), h.make_opsetid("test.customop", 1)])
    model.ir_version = 8
    return model


def test_5_dynamo_gelu_function(onnx_rewrite, tmp_path):
    onnx, numpy = onnx_modules()
    exported = tmp_path / "gelu.onnx"
    onnx.save(gelu_function_model(), str(exported))
    x = numpy.random.default_rng(0).uniform(-4, 4, (3, 8)).astype(numpy.float32)
    erf = numpy.vectorize(math.erf)
    reference = (0.5 * x * (1 + erf(x / math.sqrt(2)))).astype(numpy.float32)

    before = onnx_rewrite.check(exported, target="onnx")
    assert not before.ok
    assert_check_same_as_cli(before, exported, "--target", "onnx")
    assert onnx_rewrite.check(exported, target="ort").ok

    # A plain runtime: the call inlined, com.microsoft's Gelu spelled out in standard ops.
    output = tmp_path / "gelu-onnx.onnx"
    result = onnx_rewrite.rewrite(exported, target="onnx", output=output)
    assert result.target_met and result.functions_inlined == 1
    assert ("com.microsoft", "Gelu") in result.ops_before and ("com.microsoft", "Gelu") not in result.ops_after
    assert onnx_rewrite.check(output, target="onnx").ok
    assert_same_as_cli(result, output, exported, "--target", "onnx")
    assert_ort_matches(ort_against(output, [x], [reference], tmp_path))
    # ONNX Runtime runs the export itself (its contrib Gelu, the function inlined): the same numbers.
    assert ort_compare(exported, output, "--float-range", "-4,4")["ok"]

    # ONNX Runtime: loadable as exported; nothing to do.
    result = onnx_rewrite.rewrite(exported, target="ort", output=tmp_path / "gelu-ort.onnx")
    assert result.target_met and result.status == "unchanged"
    assert_same_as_cli(result, tmp_path / "gelu-ort.onnx", exported, "--target", "ort")


def test_5_dynamo_custom_op_function(onnx_rewrite, tmp_path):
    onnx, numpy = onnx_modules()
    exported = tmp_path / "addandround.onnx"
    onnx.save(addandround_function_model(), str(exported))
    # Halves and integers, where rounding halves to even shows (torch.round, ONNX Round).
    x = (numpy.arange(-8, 8) * 0.25).astype(numpy.float32)
    reference = numpy.round(x + x).astype(numpy.float32)

    for target, functions in (("onnx", 0), ("ort", 1)):
        before = onnx_rewrite.check(exported, target=target)
        assert {u.op_type for u in before.unloadable} >= {"CustomOpOne", "CustomOpTwo"}
        assert_check_same_as_cli(before, exported, "--target", target)
        output = tmp_path / f"addandround-{target}.onnx"
        result = onnx_rewrite.rewrite(exported, target=target, output=output)
        assert result.target_met, result.check.unloadable
        assert {"customop-one-to-add", "customop-two-to-round"} <= set(result.rules)
        assert len(result.model.functions) == functions
        assert onnx_rewrite.check(result.model, target=target).ok
        assert_same_as_cli(result, output, exported, "--target", target)
        assert_ort_matches(ort_against(output, [x], [reference], tmp_path, rtol=0, atol=0))


@pytest.mark.parametrize("builder", [gelu_function_model, addandround_function_model])
def test_the_models_built_by_hand_pass_onnxs_checker(builder):
    onnx, _ = onnx_modules()
    onnx.checker.check_model(builder())
