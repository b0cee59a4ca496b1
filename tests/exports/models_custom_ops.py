"""The seed documents' custom-op exports (docs/seed-scenarios.md of the project's shared notes), done
as the tutorials do them, with the exporter of torch 1.13:

1. mynamespace::custom_group_norm (ONNX Runtime's custom-op tutorial), defined with
   torch.library.Library("mynamespace", "DEF"), its symbolic registered at opset 9 with
   register_custom_op_symbolic, emitting mydomain::mygroupnorm(X, num_groups, scale, bias) with a
   float attribute epsilon (parse_args(..., 'f')).
2. torchvision::deform_conv2d with the deployment tutorial's placeholder symbolic (opset 9):
   custom::deform_conv2d(input, weight, offset), no attributes; and the full form real projects
   write: five inputs in the C++ schema's order, the scalar arguments as int attributes.
3. aten::asinh registered to the standard Asinh at opset 9 (torch 1.13 has no asinh symbolic);
   a torch.autograd.Function (2a + b) whose symbolic emits Constant(2), Mul, Add.
4. torch.inverse to ONNX Runtime's com.microsoft::Inverse (register_custom_op_symbolic at opset 1,
   for ::inverse and, since torch 1.13 traces torch.inverse to it, ::linalg_inv). Only ONNX Runtime
   runs it: the matrix rewrites it with --target ort.

Not here: the onnxscript ones (aten::selu to custom-onnx-script::Selu, the dynamo export with
com.microsoft::Gelu and test.customop functions) need onnxscript and a newer torch; they are built
by hand with onnx.helper elsewhere, not exported.
"""

import torch
import torchvision
from torch.onnx import register_custom_op_symbolic
from torch.onnx.symbolic_helper import parse_args

from corpus import Case, Export

_registered = {}


def _once(key, register):
    if key not in _registered:
        _registered[key] = register()
    return _registered[key]


# ---- 1. custom_group_norm --------------------------------------------------------------------

def _define_custom_group_norm():
    lib = torch.library.Library('mynamespace', 'DEF')
    lib.define('custom_group_norm(Tensor X, Tensor num_groups, Tensor scale, Tensor bias, float eps) -> Tensor')

    def custom_group_norm(X, num_groups, scale, bias, eps):
        return torch.nn.functional.group_norm(X, int(num_groups.item()), scale, bias, eps)

    lib.impl('custom_group_norm', custom_group_norm, 'CPU')

    @parse_args('v', 'v', 'v', 'v', 'f')
    def symbolic_custom_group_norm(g, input, num_groups, scale, bias, eps):
        return g.op('mydomain::mygroupnorm', input, num_groups, scale, bias, epsilon_f=eps)

    register_custom_op_symbolic('mynamespace::custom_group_norm', symbolic_custom_group_norm, 9)
    return lib


class CustomGroupNormModel(torch.nn.Module):
    def forward(self, x, num_groups, scale, bias):
        return torch.ops.mynamespace.custom_group_norm(x, num_groups, scale, bias, 0.)


def _custom_group_norm():
    _once('custom_group_norm', _define_custom_group_norm)
    x = torch.randn(3, 4, 2, 3)
    num_groups = torch.tensor([2.])
    scale = torch.rand(4) + 0.5
    bias = torch.randn(4)
    return Export(CustomGroupNormModel(), (x, num_groups, scale, bias), ['X', 'num_groups', 'scale', 'bias'], ['Y'],
                  kwargs={'custom_opsets': {'mydomain': 1}})


# ---- 2. deform_conv2d ------------------------------------------------------------------------

def _register_deform_conv2d_placeholder():
    @parse_args('v', 'v', 'v', 'v', 'v', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'none')
    def symbolic(g, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
                 n_weight_grps, n_offset_grps, use_mask):
        return g.op('custom::deform_conv2d', input, weight, offset)

    register_custom_op_symbolic('torchvision::deform_conv2d', symbolic, 9)
    return 'placeholder'


def _register_deform_conv2d_full():
    @parse_args('v', 'v', 'v', 'v', 'v', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'i', 'b')
    def symbolic(g, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
                 n_weight_grps, n_offset_grps, use_mask):
        return g.op('custom::deform_conv2d', input, weight, offset, mask, bias, stride_h_i=stride_h,
                    stride_w_i=stride_w, pad_h_i=pad_h, pad_w_i=pad_w, dilation_h_i=dil_h, dilation_w_i=dil_w,
                    groups_i=n_weight_grps, offset_groups_i=n_offset_grps, use_mask_i=int(use_mask))

    register_custom_op_symbolic('torchvision::deform_conv2d', symbolic, 9)
    return 'full'


# Both forms register a symbolic for the same op: the one registered last wins, so each build
# registers its own before exporting (the driver exports one model at a time).

class DeformConvPlaceholderModel(torch.nn.Module):
    def forward(self, input, offset, weight):
        return torchvision.ops.deform_conv2d(input, offset, weight)


def _deform_conv2d_placeholder():
    _register_deform_conv2d_placeholder()
    input = torch.rand(4, 3, 10, 10)
    offset = torch.randn(4, 18, 8, 8)
    weight = torch.rand(5, 3, 3, 3)
    return Export(DeformConvPlaceholderModel(), (input, offset, weight), ['input', 'offset', 'weight'], ['output'],
                  kwargs={'custom_opsets': {'custom': 1}})


class DeformConvFullModel(torch.nn.Module):
    """DCNv2 as detection heads write it: offsets and mask from convolutions, then DeformConv2d with
    padding 1, stride 2, 2 offset groups and a bias."""

    def __init__(self):
        super().__init__()
        k, og = 3, 2
        self.offset = torch.nn.Conv2d(4, 2 * og * k * k, 3, stride=2, padding=1)
        self.mask = torch.nn.Conv2d(4, og * k * k, 3, stride=2, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(4, 6, k, stride=2, padding=1, bias=True)
        with torch.no_grad():
            self.offset.weight.mul_(5)

    def forward(self, x):
        return self.dcn(x, self.offset(x), torch.sigmoid(self.mask(x)))


def _deform_conv2d_full():
    _register_deform_conv2d_full()
    x = torch.randn(2, 4, 9, 9)
    return Export(DeformConvFullModel(), (x,), ['input'], ['output'],
                  dynamic_axes={'input': {0: 'batch'}, 'output': {0: 'batch'}},
                  kwargs={'custom_opsets': {'custom': 1}})


# ---- 3. asinh, autograd.Function -------------------------------------------------------------

def _register_asinh():
    def asinh_symbolic(g, input, *, out=None):
        return g.op('Asinh', input)

    register_custom_op_symbolic('::asinh', asinh_symbolic, 9)
    return True


class AsinhModel(torch.nn.Module):
    def forward(self, x):
        return torch.asinh(x)


def _asinh():
    _once('asinh', _register_asinh)
    return Export(AsinhModel(), (torch.randn(1, 3, 10, 10) * 3,), ['x'], ['y'])


class MyAddFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return 2 * a + b

    @staticmethod
    def symbolic(g, a, b):
        two = g.op('Constant', value_t=torch.tensor([2]))  # int64, as the tutorial writes it
        a = g.op('Mul', a, two)
        return g.op('Add', a, b)


my_add = MyAddFunction.apply


class MyAdd(torch.nn.Module):
    def forward(self, a, b):
        return my_add(a, b)


def _autograd_function():
    return Export(MyAdd(), (torch.rand(1, 3, 10, 10), torch.rand(1, 3, 10, 10)), ['a', 'b'], ['y'])


# ---- 4. com.microsoft::Inverse ---------------------------------------------------------------

def _register_inverse():
    def my_inverse(g, self):
        return g.op('com.microsoft::Inverse', self)

    register_custom_op_symbolic('::inverse', my_inverse, 1)
    register_custom_op_symbolic('::linalg_inv', my_inverse, 1)
    return True


class InverseModel(torch.nn.Module):
    def forward(self, x):
        return torch.inverse(x)


def _inverse():
    _once('inverse', _register_inverse)
    x = torch.randn(2, 3, 3) + 4 * torch.eye(3)  # well conditioned
    return Export(InverseModel(), (x,), ['x'], ['y'], kwargs={'custom_opsets': {'com.microsoft': 1}})


def cases():
    return [
        Case('seed_custom_group_norm', 'seed-custom-op', _custom_group_norm, 'X 3x4x2x3, num_groups [2.], scale, bias [4]',
             slice=True, notes='mynamespace::custom_group_norm -> mydomain::mygroupnorm(epsilon=0), torch.library op'),
        Case('seed_deform_conv2d', 'seed-custom-op', _deform_conv2d_placeholder,
             'input 4x3x10x10, offset 4x18x8x8, weight 5x3x3x3', slice=True,
             notes='torchvision::deform_conv2d -> custom::deform_conv2d(input, weight, offset): the placeholder symbolic'),
        Case('seed_deform_conv2d_full', 'seed-custom-op', _deform_conv2d_full, 'input 2x4x9x9, dynamic batch', slice=True,
             notes='custom::deform_conv2d(input, weight, offset, mask, bias) with stride 2, pad 1, 2 offset groups as attributes'),
        Case('seed_asinh', 'seed-custom-op', _asinh, 'x 1x3x10x10', slice=True,
             notes='aten::asinh registered to Asinh at opset 9'),
        Case('seed_autograd_function', 'seed-custom-op', _autograd_function, 'a, b 1x3x10x10', slice=True,
             notes='autograd.Function 2a+b with a symbolic emitting Constant(2), Mul, Add'),
        Case('seed_inverse_contrib', 'seed-custom-op', _inverse, 'x 2x3x3 (+4I)', slice=True,
             rewrite_args=['--target', 'ort'],
             notes='torch.inverse -> com.microsoft::Inverse (ONNX Runtime only: rewritten with --target ort)'),
    ]
