import pytest
import torch
from torchvision.models import resnet18

from gpuops_trainer.errors import ConfigError
from gpuops_trainer.models import MODELS, build_model


def test_resnet18_trains_and_predicts_on_a_tiny_image():
    torch.manual_seed(0)
    model = build_model("retinanet_resnet18_fpn", num_classes=3, min_size=64, max_size=64)
    images = [torch.rand(3, 64, 64)]
    targets = [{"boxes": torch.tensor([[4.0, 6.0, 40.0, 30.0]]), "labels": torch.tensor([2])}]
    model.train()
    losses = model(images, targets)
    assert set(losses) == {"classification", "bbox_regression"}
    assert all(torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    model.eval()
    with torch.no_grad():
        (detections,) = model(images)
    assert set(detections) == {"boxes", "scores", "labels"}
    assert model.head.classification_head.num_classes == 3
    assert model.transform.min_size == (64,) and model.transform.max_size == 64


@pytest.mark.parametrize(
    "name",
    [
        "retinanet_resnet50_fpn",
        "retinanet_resnet50_fpn_v2",
        "retinanet_resnet34_fpn",
        "retinanet_resnet101_fpn",
        "retinanet_resnext50_32x4d_fpn",
    ],
)
def test_resnet50_models_construct(name):
    model = build_model(name, num_classes=5, min_size=128, max_size=128)
    assert model.head.classification_head.num_classes == 5
    assert model.transform.min_size == (128,)
    trainable_bn = [m for m in model.backbone.body.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert trainable_bn  # from scratch: ordinary, trainable batch norm


def test_v2_uses_giou_and_groupnorm_head():
    model = build_model("retinanet_resnet50_fpn_v2", num_classes=2, min_size=64, max_size=64)
    assert model.head.regression_head._loss_type == "giou"
    assert any(isinstance(m, torch.nn.GroupNorm) for m in model.head.modules())


def test_unknown_model_names_the_choices():
    with pytest.raises(ConfigError) as info:
        build_model("yolo", num_classes=2, min_size=64, max_size=64)
    assert "--model" in str(info.value)
    for name in MODELS:
        assert name in str(info.value)


def test_backbone_weights_load_from_a_local_file_and_freeze_early_layers(tmp_path):
    torch.manual_seed(1)
    source = resnet18(weights=None)  # stands in for a downloaded ImageNet file, fc included
    path = tmp_path / "resnet18.pth"
    torch.save(source.state_dict(), path)
    model = build_model(
        "retinanet_resnet18_fpn",
        num_classes=2,
        min_size=64,
        max_size=64,
        backbone_weights=str(path),
    )
    body = model.backbone.body
    assert torch.equal(body.conv1.weight, source.conv1.weight)
    assert torch.equal(body.layer4[1].conv2.weight, source.layer4[1].conv2.weight)
    # torchvision's rule for a pretrained backbone: frozen BN, only layer2-4 train.
    assert not body.conv1.weight.requires_grad and not body.layer1[0].conv1.weight.requires_grad
    assert body.layer2[0].conv1.weight.requires_grad
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in body.modules())


def test_backbone_weights_that_do_not_match_are_a_config_error(tmp_path):
    path = tmp_path / "wrong.pth"
    torch.save({"something": torch.zeros(1)}, path)
    with pytest.raises(ConfigError, match="--backbone-weights"):
        build_model("retinanet_resnet18_fpn", 2, 64, 64, backbone_weights=str(path))
    with pytest.raises(ConfigError, match="not found"):
        build_model(
            "retinanet_resnet18_fpn", 2, 64, 64, backbone_weights=str(tmp_path / "missing.pth")
        )


def test_resnext_backbone_is_grouped_like_mlperf():
    model = build_model("retinanet_resnext50_32x4d_fpn", num_classes=264, min_size=64, max_size=64)
    assert model.backbone.body.layer1[0].conv2.groups == 32
    assert model.head.classification_head.num_classes == 264
