"""torchvision's detection and segmentation models that export with torch 1.13's exporter: SSDlite,
Faster R-CNN MobileNet (both sizes), FCN, DeepLabv3, LRASPP. Random weights (weights=None,
weights_backbone=None); the seed is set by the driver. (The ResNet-50 detectors, RetinaNet, FCOS,
Mask/Keypoint R-CNN and SSD300-VGG16 are left out: the same postprocessing ops at several times the
size.)"""

import torch
from torchvision import models

from corpus import Case, Export


class _Detector(torch.nn.Module):
    """The model takes a list of images; one image as a plain input, as torchvision's ONNX tests do."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, image):
        out = self.model([image])[0]
        return out['boxes'], out['labels'], out['scores']


def _variance_preserving_init(model, class_logit_scale):
    """torchvision's own initialisation of the detection heads (std 0.01) with random backbones makes
    every class score equal (SSDlite: 300 detections all at 1/91) or below the score threshold
    (Faster R-CNN: none), so ties decide the order and the outputs test nothing. He-normal weights
    keep the activations at unit scale through the network; the box regressors keep their small
    init, so boxes stay near their anchors; the class logits are scaled so that scores spread
    between 0 and 1 instead of saturating at exactly 1.0."""
    with torch.no_grad():
        for name, module in model.named_modules():
            if any(k in name for k in ('bbox_pred', 'bbox_reg', 'regression_head')):
                continue
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                torch.nn.init.kaiming_normal_(module.weight, nonlinearity='relu')
                if module.bias is not None:
                    torch.nn.init.normal_(module.bias, std=0.1)
        for name, p in model.named_parameters():
            if 'cls_score' in name:
                p.mul_(class_logit_scale)


def _detection(name, size, notes, class_logit_scale=1.0, **kwargs):
    def build():
        model = models.get_model(name, weights=None, weights_backbone=None, **kwargs)
        _variance_preserving_init(model, class_logit_scale)
        image = torch.rand(3, size[0], size[1])
        return Export(_Detector(model), (image,), ['image'], ['boxes', 'labels', 'scores'],
                      dynamic_axes={'boxes': {0: 'detections'}, 'labels': {0: 'detections'}, 'scores': {0: 'detections'}})

    return Case(name, 'torchvision-detection', build, f'3x{size[0]}x{size[1]} image (resized inside)',
                notes=notes + '; He-normal re-initialisation (see _variance_preserving_init)')


class _Segmenter(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)['out']


def _segmentation(name, size, slice_=False):
    def build():
        model = models.get_model(name, weights=None, weights_backbone=None, aux_loss=False)
        x = torch.randn(1, 3, size, size)
        return Export(_Segmenter(model), (x,), ['input'], ['out'],
                      dynamic_axes={'input': {0: 'batch'}, 'out': {0: 'batch'}})

    return Case(name, 'torchvision-segmentation', build, f'1x3x{size}x{size}, dynamic batch', slice=slice_)


def cases():
    out = [
        # 320x448: resized to 320x448 by the model, a multiple of 32, so no zero padding (whose
        # equal features give equal scores, and ties make the order arbitrary).
        _detection('ssdlite320_mobilenet_v3_large', (320, 448), 'resized to 320x320 inside'),
        _detection('fasterrcnn_mobilenet_v3_large_320_fpn', (320, 448), 'min_size 320 (its default)',
                   class_logit_scale=0.1),
        _detection('fasterrcnn_mobilenet_v3_large_fpn', (320, 448), 'min_size 320 instead of 800, to keep it small',
                   class_logit_scale=0.1, min_size=320, max_size=640),
    ]
    out += [
        _segmentation('fcn_resnet50', 64),
        _segmentation('fcn_resnet101', 64),
        _segmentation('deeplabv3_resnet50', 64),
        _segmentation('deeplabv3_resnet101', 64),
        _segmentation('deeplabv3_mobilenet_v3_large', 64),
        _segmentation('lraspp_mobilenet_v3_large', 64, slice_=True),
    ]
    return out
