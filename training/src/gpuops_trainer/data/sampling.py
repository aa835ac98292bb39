"""Batch sampling: aspect-ratio grouping and mid-epoch resume.

``GroupedBatchSampler`` has the semantics of torchvision's detection reference: batches hold
images of one aspect-ratio group (less padding, so less wasted compute), drawn in the
order of the wrapped sampler (a ``DistributedSampler`` here, so each rank groups its own
shard), ``len(sampler) // batch_size`` batches per epoch, the last ones topped up from their
group. ``ResumableBatchSampler`` skips the batches a checkpoint says were already consumed.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence

from torch.utils.data import Sampler


def aspect_ratio_groups(aspect_ratios: Sequence[float], factor: int) -> list[int]:
    """Group id per image: bins at ``2 ** linspace(-1, 1, 2 * factor + 1)`` of width/height,
    as the reference's ``create_aspect_ratio_groups``; ``factor`` 0 puts all in one group."""
    if factor <= 0:
        return [0] * len(aspect_ratios)
    steps = 2 * factor
    bins = [2 ** (-1 + 2 * i / steps) for i in range(steps + 1)]
    return [bisect.bisect_right(bins, ratio) for ratio in aspect_ratios]


class GroupedBatchSampler(Sampler[list[int]]):
    def __init__(self, sampler: Sampler[int], group_ids: Sequence[int], batch_size: int):
        self.sampler = sampler
        self.group_ids = group_ids
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[list[int]]:
        pending: dict[int, list[int]] = defaultdict(list)
        seen: dict[int, list[int]] = defaultdict(list)
        emitted = 0
        for index in self.sampler:
            group = self.group_ids[index]
            pending[group].append(index)
            seen[group].append(index)
            if len(pending[group]) == self.batch_size:
                yield pending.pop(group)
                emitted += 1
        # Top up the fullest partial groups with earlier images of the same group until
        # the epoch has its full number of batches.
        for group, batch in sorted(pending.items(), key=lambda item: len(item[1]), reverse=True):
            if emitted >= len(self):
                break
            fill = itertools.islice(itertools.cycle(seen[group]), self.batch_size - len(batch))
            yield batch + list(fill)
            emitted += 1

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size


class ResumableBatchSampler(Sampler[list[int]]):
    """Wraps a batch sampler; ``skip`` batches at the start of the next epoch are left out
    (set from a checkpoint, reset to 0 by the training loop once that epoch has started)."""

    def __init__(self, batch_sampler: Iterable[list[int]]):
        self.batch_sampler = batch_sampler
        self.skip = 0

    @property
    def batches_per_epoch(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        return itertools.islice(iter(self.batch_sampler), self.skip, None)

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip, 0)
