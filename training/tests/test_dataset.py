import pytest
import torch
from torch.utils.data import DataLoader

from gpuops_trainer.data import SyntheticDetection, check_target, collate_lists
from gpuops_trainer.errors import EXIT_DATA, DataError


def test_same_index_gives_identical_sample_across_instances():
    first = SyntheticDetection(8, num_classes=5, image_size=64, seed=3)
    second = SyntheticDetection(8, num_classes=5, image_size=64, seed=3)
    for index in (0, 5, 7):
        image_a, target_a = first[index]
        image_b, target_b = second[index]
        assert torch.equal(image_a, image_b)
        assert torch.equal(target_a["boxes"], target_b["boxes"])
        assert torch.equal(target_a["labels"], target_b["labels"])


def test_seed_and_index_change_the_sample():
    dataset = SyntheticDetection(4, num_classes=5, image_size=64, seed=0)
    other_seed = SyntheticDetection(4, num_classes=5, image_size=64, seed=1)
    assert not torch.equal(dataset[0][0], dataset[1][0])
    assert not torch.equal(dataset[0][0], other_seed[0][0])


def test_boxes_are_valid_and_labels_in_range():
    dataset = SyntheticDetection(64, num_classes=3, image_size=48, seed=0)
    counts = set()
    for index in range(len(dataset)):
        image, target = dataset[index]
        assert image.shape == (3, 48, 48)
        assert image.dtype == torch.float32
        assert float(image.min()) >= 0.0 and float(image.max()) <= 1.0
        boxes, labels = target["boxes"], target["labels"]
        assert boxes.dtype == torch.float32 and labels.dtype == torch.int64
        assert len(boxes) in range(1, 5)
        assert len(boxes) == len(labels)
        assert bool((boxes[:, 0] >= 0).all() and (boxes[:, 1] >= 0).all())
        assert bool((boxes[:, 2] <= 48).all() and (boxes[:, 3] <= 48).all())
        assert bool((boxes[:, 2:] > boxes[:, :2]).all())
        assert int(labels.min()) >= 0 and int(labels.max()) < dataset.num_classes
        check_target(target, dataset.num_classes)
        counts.add(len(boxes))
    assert len(counts) > 1  # the object count varies


def test_object_pixels_take_the_class_colour():
    dataset = SyntheticDetection(1, num_classes=4, image_size=64, seed=0)
    image, target = dataset[0]
    x1, y1, x2, y2 = (int(v) for v in target["boxes"][-1].tolist())
    label = int(target["labels"][-1])  # drawn last, so nothing covers its centre
    centre = image[:, (y1 + y2) // 2, (x1 + x2) // 2]
    assert torch.allclose(centre, dataset.colours[label])


def test_index_out_of_range():
    dataset = SyntheticDetection(2, num_classes=2, image_size=32)
    try:
        dataset[2]
    except IndexError:
        return
    raise AssertionError("expected IndexError")


def test_loader_collates_lists():
    dataset = SyntheticDetection(4, num_classes=2, image_size=32)
    images, targets = next(iter(DataLoader(dataset, batch_size=3, collate_fn=collate_lists)))
    assert len(images) == 3 and len(targets) == 3
    assert isinstance(targets[0], dict)


def test_bad_targets_are_data_errors():
    good = {"boxes": torch.tensor([[0.0, 0.0, 4.0, 4.0]]), "labels": torch.tensor([1])}
    check_target(good, num_classes=2)
    bad_targets = [
        {"boxes": torch.tensor([[5.0, 0.0, 4.0, 4.0]]), "labels": torch.tensor([1])},
        {"boxes": torch.tensor([[0.0, 0.0, float("nan"), 4.0]]), "labels": torch.tensor([1])},
        {"boxes": torch.tensor([[0.0, 0.0, 4.0, 4.0]]), "labels": torch.tensor([2])},
        {"boxes": torch.zeros(2, 4), "labels": torch.tensor([1])},
    ]
    for target in bad_targets:
        with pytest.raises(DataError) as info:
            check_target(target, num_classes=2)
        assert info.value.exit_code == EXIT_DATA == 3
