"""torchvision's classification models: every one torchvision 0.14 lists. Random weights
(weights=None); the seed is set by the driver."""

import torch
from torchvision import models

from corpus import Case, Export

# Classification input size: small where the architecture allows it (every net ends in an adaptive
# or global pool). Exceptions are the nets whose shapes are fixed by their design:
#   alexnet, vgg*: torch exports AdaptiveAvgPool2d to 6x6 / 7x7 only when the feature map is a
#     multiple of it (an AveragePool): 224 gives exactly 6x6 / 7x7.
#   inception_v3: 75x75 is its documented minimum.
#   maxvit_t: every stage's grid must split into 7x7 windows: 224.
#   vit_*: image_size is a constructor argument (positional embedding sized to it): 4x4 patches
#     for /16 and /14, 2x2 for /32.
CLASSIFICATION_SIZE = {
    'alexnet': 224, 'inception_v3': 75, 'maxvit_t': 224,
    **{f'vgg{d}{bn}': 224 for d in (11, 13, 16, 19) for bn in ('', '_bn')},
}
VIT_IMAGE = {'vit_b_16': 64, 'vit_l_16': 64, 'vit_h_14': 56, 'vit_b_32': 64, 'vit_l_32': 64}
DEFAULT_SIZE = 64

# Over 1 GB of weights each: exported with --big only. Their ops are those of a smaller sibling
# (vit_l_* = vit_b_*, regnet_y_128gf = regnet_y_32gf), only the widths differ.
BIG = {'vit_h_14', 'vit_l_16', 'vit_l_32', 'regnet_y_128gf'}

SLICE_CLASSIFICATION = {'resnet18', 'mobilenet_v3_small', 'squeezenet1_1', 'efficientnet_b0'}


def _classification(name):
    size = VIT_IMAGE.get(name, CLASSIFICATION_SIZE.get(name, DEFAULT_SIZE))

    def build():
        kwargs = {'weights': None}
        if name in VIT_IMAGE:
            kwargs['image_size'] = size
        if name == 'inception_v3':
            kwargs.update(aux_logits=False, init_weights=True)
        if name == 'googlenet':
            kwargs.update(aux_logits=False, init_weights=True)
        model = models.get_model(name, **kwargs)
        x = torch.randn(1, 3, size, size)
        return Export(model, (x,), ['input'], ['logits'],
                      dynamic_axes={'input': {0: 'batch'}, 'logits': {0: 'batch'}})

    return Case(name, 'torchvision-classification', build, f'1x3x{size}x{size}, dynamic batch',
                slice=name in SLICE_CLASSIFICATION, big=name in BIG)


def cases():
    return [_classification(name) for name in sorted(models.list_models(module=models))]
