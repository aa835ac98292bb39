"""Model factory: RetinaNet variants built without downloading anything.

Backbones follow torchvision's builders: with a pretrained backbone (``--backbone-weights``)
batch norm is frozen and only the last ``trainable_layers`` stages train; from scratch,
everything trains with ordinary batch norm.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial

import torch
from torch import nn
from torchvision.models import resnet18, resnet34, resnet50, resnet101, resnext50_32x4d
from torchvision.models.detection import RetinaNet
from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
from torchvision.models.detection.retinanet import RetinaNetHead, _default_anchorgen
from torchvision.ops.feature_pyramid_network import LastLevelP6P7
from torchvision.ops.misc import FrozenBatchNorm2d

from .errors import ConfigError

PRETRAINED_TRAINABLE_LAYERS = 3  # torchvision's default when the backbone is pretrained
ALL_LAYERS = 5


def _backbone_norm(pretrained: bool) -> Callable[..., nn.Module]:
    return FrozenBatchNorm2d if pretrained else nn.BatchNorm2d


def _load_backbone_weights(resnet: nn.Module, path: str) -> None:
    """Load a local ResNet state dict (torchvision's ImageNet files work as they are)."""
    if not os.path.isfile(path):
        raise ConfigError(f"--backbone-weights: file not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any unreadable file is a usage error here
        raise ConfigError(f"--backbone-weights: cannot read {path}: {exc}") from None
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]  # a checkpoint that wraps the state dict
    # The classifier is not part of the detection backbone.
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    missing, unexpected = resnet.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("fc.")]
    if missing or unexpected:
        raise ConfigError(
            f"--backbone-weights: {path} does not match the backbone "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )


def _resnet_fpn(
    resnet_fn: Callable[..., nn.Module],
    p6p7_in_channels: int,
    backbone_weights: str | None,
    trainable_layers: int | None,
    frozen_bn_when_pretrained: bool = True,
) -> nn.Module:
    pretrained = backbone_weights is not None
    norm = _backbone_norm(pretrained and frozen_bn_when_pretrained)
    resnet = resnet_fn(weights=None, norm_layer=norm)
    if pretrained:
        _load_backbone_weights(resnet, backbone_weights)
        layers = PRETRAINED_TRAINABLE_LAYERS if trainable_layers is None else trainable_layers
    else:
        layers = ALL_LAYERS  # freezing random weights makes no sense
    if not 0 <= layers <= ALL_LAYERS:
        raise ConfigError(f"--trainable-backbone-layers: must be 0-{ALL_LAYERS}, got {layers}")
    # P3-P5 from C3-C5; P2 would add too many anchors (RetinaNet paper).
    return _resnet_fpn_extractor(
        resnet,
        layers,
        returned_layers=[2, 3, 4],
        extra_blocks=LastLevelP6P7(p6p7_in_channels, 256),
    )


def _retinanet_resnet50_fpn(num_classes: int, weights: str | None, layers: int | None, **kw):
    # v1 computes P6 from P5 (256 channels), as torchvision does.
    backbone = _resnet_fpn(resnet50, 256, weights, layers)
    return RetinaNet(backbone, num_classes, **kw)


def _retinanet_resnet50_fpn_v2(num_classes: int, weights: str | None, layers: int | None, **kw):
    # v2 computes P6 from C5, keeps batch norm trainable, uses a GroupNorm head and GIoU loss.
    backbone = _resnet_fpn(resnet50, 2048, weights, layers, frozen_bn_when_pretrained=False)
    anchor_generator = _default_anchorgen()
    head = RetinaNetHead(
        backbone.out_channels,
        anchor_generator.num_anchors_per_location()[0],
        num_classes,
        norm_layer=partial(nn.GroupNorm, 32),
    )
    head.regression_head._loss_type = "giou"
    return RetinaNet(backbone, num_classes, anchor_generator=anchor_generator, head=head, **kw)


def _retinanet_resnet18_fpn(num_classes: int, weights: str | None, layers: int | None, **kw):
    # Small model for CPU runs and tests: P6 from C5 (512 channels).
    backbone = _resnet_fpn(resnet18, 512, weights, layers)
    return RetinaNet(backbone, num_classes, **kw)


def _retinanet_resnet34_fpn(num_classes: int, weights: str | None, layers: int | None, **kw):
    # Basic-block ResNet like ResNet-18: P6 from C5 (512 channels).
    backbone = _resnet_fpn(resnet34, 512, weights, layers)
    return RetinaNet(backbone, num_classes, **kw)


def _retinanet_resnet101_fpn(num_classes: int, weights: str | None, layers: int | None, **kw):
    # Built like the ResNet-50 v1 model (P6 from P5).
    backbone = _resnet_fpn(resnet101, 256, weights, layers)
    return RetinaNet(backbone, num_classes, **kw)


def _retinanet_resnext50_32x4d_fpn(num_classes: int, weights: str | None, layers: int | None, **kw):
    # MLPerf Training's single-stage detector: torchvision RetinaNet with this backbone,
    # P3-P5 from C3-C5 and P6 from P5.
    backbone = _resnet_fpn(resnext50_32x4d, 256, weights, layers)
    return RetinaNet(backbone, num_classes, **kw)


MODELS: dict[str, Callable[..., RetinaNet]] = {
    "retinanet_resnet50_fpn": _retinanet_resnet50_fpn,
    "retinanet_resnet50_fpn_v2": _retinanet_resnet50_fpn_v2,
    "retinanet_resnet18_fpn": _retinanet_resnet18_fpn,
    "retinanet_resnet34_fpn": _retinanet_resnet34_fpn,
    "retinanet_resnet101_fpn": _retinanet_resnet101_fpn,
    "retinanet_resnext50_32x4d_fpn": _retinanet_resnext50_32x4d_fpn,
}


def build_model(
    name: str,
    num_classes: int,
    min_size: int,
    max_size: int,
    backbone_weights: str | None = None,
    trainable_backbone_layers: int | None = None,
) -> RetinaNet:
    """``num_classes`` is the number of sigmoid outputs: labels must lie in [0, num_classes).

    min_size/max_size are always passed: RetinaNet would otherwise resize every image to
    800 px, which makes CPU runs 50x slower.
    """
    if name not in MODELS:
        raise ConfigError(f"--model: unknown model {name!r} (choose from {', '.join(MODELS)})")
    return MODELS[name](
        num_classes,
        backbone_weights,
        trainable_backbone_layers,
        min_size=min_size,
        max_size=max_size,
    )
