"""What one batch is, decided before any decoding: the contract between the loader
(which plans an epoch) and the batch sources that fill its batches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .augment import AugmentSpec, plan as plan_augment
from ..core.choices import Order
from .order import batch_count, deal_shard_run, epoch_order, quasi_random_order, shard, shard_run


@dataclass(frozen=True)
class BatchPlan:
    epoch: int
    number: int          # position of the batch in this rank's epoch
    indices: np.ndarray  # int64 (n,) record indices
    boxes: np.ndarray    # (n, 4) crop in source pixels: top, left, height, width; int64 (whole pixels) in
                         # training, float64 in evaluation (a resized image's region: see augment.center_crop)
    flips: np.ndarray    # bool (n,)
    labels: np.ndarray   # int64 (n,)

    def __len__(self) -> int:
        return len(self.indices)


@dataclass(frozen=True)
class Segment:
    """A part of an epoch delivered on one topology: ``world_size`` ranks, batches of
    ``batch_size``, rank r having delivered ``batches[r]`` of its share."""

    world_size: int
    batch_size: int
    batches: tuple[int, ...]


@dataclass(frozen=True)
class EpochPlan:
    """Everything needed to plan the batches of one epoch on one rank: a pure function of
    these fields and the store's labels and sizes."""

    spec: AugmentSpec
    seed: int
    epoch: int
    order: Order
    batch_size: int
    drop_last: bool
    rank: int = 0
    world_size: int = 1
    even_shards: bool = True
    block: int = 16       # quasi-random order: records per block read in one go
    window: int = 256     # ... and blocks shuffled together
    shards: tuple[int, ...] = ()  # order='shards': the record count of each shard, in store order (none: one)
    resumed: tuple[Segment, ...] = ()   # parts of this epoch delivered before, on other topologies

    def samples(self, n: int) -> np.ndarray:
        """The record indices this rank visits in this epoch, in order: its share of the
        epoch's run, or, after segments delivered on other topologies, of what they left."""
        run, owner = self._run(n)
        seen = np.zeros(n, dtype=bool)
        for k, part in enumerate(self.resumed):
            for rank, batches in enumerate(part.batches):
                seen[self._deal(run, owner, rank, part.world_size, k)[:batches * part.batch_size]] = True
            keep = ~seen[run]   # the records no rank has delivered, in the run's order
            run, owner = run[keep], owner[keep] if owner is not None else None
        return self._deal(run, owner, self.rank, self.world_size, len(self.resumed))

    def _run(self, n: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Every record of the epoch in its order before dealing (and for order='shards' each
        record's shard place in the run)."""
        if self.order is Order.SHARDS:
            counts = self.shards or (n,)
            if sum(counts) != n:
                raise ValueError(f"order='shards' needs a sharded data set (shard counts {self.shards!r} for {n} "
                                 "records); open its shard index, or choose another order")
            return shard_run(counts, self.seed, self.epoch)
        if self.order is Order.QUASI_RANDOM:
            return quasi_random_order(n, self.seed, self.epoch, self.block, self.window), None
        return epoch_order(n, self.seed, self.epoch, self.order is not Order.SEQUENTIAL), None

    def _deal(self, run: np.ndarray, owner: np.ndarray | None, rank: int, world_size: int, part: int) -> np.ndarray:
        """Rank ``rank``'s share of ``run`` among ``world_size``: every world_size-th record, or
        for order='shards' a consecutive run of shards (its window shuffle drawn per ``part``)."""
        if owner is None:
            return shard(run, rank, world_size, pad=self.even_shards)
        stream = (self.seed, self.epoch) if part == 0 else (self.seed, self.epoch, part)
        return deal_shard_run(run, owner, stream, rank, world_size, self.even_shards)

    def count(self, n: int) -> int:
        """Batches of this epoch on this rank."""
        return batch_count(len(self.samples(n)), self.batch_size, self.drop_last)

    def batches(self, labels: np.ndarray, sizes: np.ndarray, start: int = 0,
                samples: np.ndarray | None = None) -> Iterator[BatchPlan]:
        """The BatchPlans of this epoch from batch number ``start`` on; ``samples``, when
        given, is ``self.samples(len(labels))`` already computed."""
        samples = self.samples(len(labels)) if samples is None else samples
        for number in range(start, batch_count(len(samples), self.batch_size, self.drop_last)):
            idx = samples[number * self.batch_size:(number + 1) * self.batch_size]
            hw = sizes[idx]
            boxes, flips = plan_augment(self.spec, self.seed, self.epoch, idx, hw[:, 0], hw[:, 1])
            yield BatchPlan(self.epoch, number, idx, boxes, flips, labels[idx])
