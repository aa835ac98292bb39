import itertools

from torch.utils.data import DistributedSampler

from gpuops_trainer.data import GroupedBatchSampler, ResumableBatchSampler, aspect_ratio_groups


def test_groups_follow_torchvision_bins():
    # factor 3: bins 2 ** linspace(-1, 1, 7); portrait, square and landscape split apart.
    groups = aspect_ratio_groups([0.5, 0.75, 1.0, 1.33, 1.5, 2.5], 3)
    assert groups[0] < groups[1] < groups[2] < groups[3] <= groups[4] < groups[5]
    assert aspect_ratio_groups([0.5, 2.0], 0) == [0, 0]


def test_grouped_batches_are_homogeneous_and_complete_per_rank():
    ratios = [1.5 if i % 3 else 0.66 for i in range(23)]
    group_ids = aspect_ratio_groups(ratios, 3)
    for rank in range(2):
        sampler = DistributedSampler(range(23), num_replicas=2, rank=rank, shuffle=True, seed=1)
        sampler.set_epoch(4)
        batches = GroupedBatchSampler(sampler, group_ids, batch_size=3)
        listed = list(batches)
        assert len(listed) == len(batches) == 12 // 3
        assert all(len(batch) == 3 for batch in listed)
        assert all(len({group_ids[i] for i in batch}) == 1 for batch in listed)
        assert set(itertools.chain(*listed)) <= set(sampler)
        assert listed == list(batches)  # same epoch, same batches: resumable


def test_resumable_sampler_skips_consumed_batches():
    batches = [[0, 1], [2, 3], [4, 5], [6, 7]]
    resumable = ResumableBatchSampler(batches)
    assert list(resumable) == batches and len(resumable) == 4
    resumable.skip = 3
    assert list(resumable) == [[6, 7]] and len(resumable) == 1
    assert resumable.batches_per_epoch == 4
