"""The CPU engine's parts, built by hand around one store and one epoch, for the tests of
the parts themselves (feed, dispatch, workers): workers of either kind, a ring of Slots in
arenas, and the queue that has the workers fill them."""
from __future__ import annotations

import shutil

from feedline.planning.augment import AugmentSpec
from feedline.core.choices import OnError, Order
from feedline.core.config import OutputSpec
from feedline.decoders import get_decoder
from feedline.planning.plan import EpochPlan
from feedline.sources.dispatch import ChunkQueue
from feedline.sources.fill import SampleSpec
from feedline.sources.policy import BadRecordPolicy
from feedline.sources.process_workers import ProcessWorkers
from feedline.sources.ring import ArenaRing, RingSpec
from feedline.sources.thread_workers import ThreadWorkers
from feedline.core.stats import LoaderStats

HOST = OutputSpec(mean=None, std=None, dtype=None, channels_last=True, device="cpu")   # uint8 NHWC rows
NOT_A_JPEG = b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10


def epoch_plan(order=Order.SEQUENTIAL, size=(32, 32), batch_size=4, train=True, seed=0) -> EpochPlan:
    return EpochPlan(AugmentSpec(size=size, train=train), seed=seed, epoch=0, order=order, batch_size=batch_size,
                     drop_last=False)


def make_workers(store, kind="threads", count=2, decoder="opencv", transforms=None, substitute=False, seed=0):
    spec = SampleSpec(store, get_decoder(decoder), transforms, seed, substitute)
    return ThreadWorkers(spec, count) if kind == "threads" else ProcessWorkers(spec, count)


def ring_of(workers, epoch: EpochPlan, slots_ahead=1, output=HOST, targets=None) -> ArenaRing:
    return ArenaRing(RingSpec(slots_ahead, epoch.batch_size, output, pin=False), epoch.spec.size, workers, targets)


def queue_of(workers, epoch: EpochPlan, stats=None, on_error=OnError.RAISE, targets=None):
    stats = stats if stats is not None else LoaderStats()
    workers.start()
    policy = BadRecordPolicy(workers.spec.store, on_error, epoch, stats.ledger)
    return ChunkQueue(workers, epoch, policy, stats, targets)


def damaged_copy(folder, tmp_path, rels) -> str:
    """A copy of the image folder ``folder`` whose files ``rels`` are not JPEGs any more."""
    root = tmp_path / "images"
    shutil.copytree(folder, root)
    for rel in rels:
        (root / rel).write_bytes(NOT_A_JPEG)
    return str(root)
