"""FeedLoader: the one-line replacement for torch.utils.data.DataLoader over images."""
from __future__ import annotations

import collections
import logging
import os
import time
import weakref
from typing import Iterator

import torch

from .augment import AugmentSpec
from .decoders.base import Decoder
from .config import (IMAGENET_MEAN, IMAGENET_STD, LoaderConfig, build_output, distributed_position,
                     usable_cores)
from .order import batch_count
from .pipeline.plan import EpochPlan
from .stats import LoaderStats
from .stores import Store, open_dataset

log = logging.getLogger(__name__)

STATE_VERSION = 1


class FeedLoader:
    """Yields ``(images, labels)``: images N x 3 x H x W, normalized with ``mean``/``std``
    (uint8 when ``mean=None``), in ``dtype`` and channels_last memory, on ``device``;
    labels int64 on ``device``.

    ``decoder`` is a registered name ("auto", "turbojpeg", "opencv", "pil", "dali") or a
    Decoder instance. Decode threads write decoded, cropped, resized, flipped samples straight into a
    ring of ``prefetch + 2`` (pinned) uint8 batch buffers; on CUDA a side stream copies
    and normalizes the next batch while the current step runs. Order, crops and flips
    are pure functions of (seed, epoch, index): the same batches for any thread count,
    and ``state_dict()`` resumes mid-epoch exactly.
    """

    def __init__(self, source: str | os.PathLike | Store, batch_size: int = 256, shuffle: bool = False,
                 train: bool = True, size: int | tuple[int, int] = 224, *, decoder: str | Decoder = "auto",
                 num_threads: int | str = "auto", device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None, channels_last: bool = True, drop_last: bool = False,
                 seed: int = 0, mean=IMAGENET_MEAN, std=IMAGENET_STD, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3), crop_fraction: float = 0.875, flip: bool = True,
                 prefetch: int = 2, on_error: str = "raise", rank: int | None = None,
                 world_size: int | None = None, num_workers: int | None = None,
                 pin_memory: bool | None = None, persistent_workers: bool | None = None):
        # DataLoader's num_workers maps onto threads; persistent_workers needs nothing:
        # threads are cheap to start each epoch and the buffers persist anyway.
        del persistent_workers
        if num_workers is not None and num_threads == "auto":
            num_threads = max(1, int(num_workers))
        if num_threads == "auto":
            num_threads = usable_cores()
        rank, world_size = distributed_position(rank, world_size)
        output = build_output(mean, std, dtype, channels_last, device)
        from .decoders import resolve_decoder
        # A Decoder instance is used as it is, e.g. get_decoder("turbojpeg", fast_dct=True).
        self._decoder = decoder if isinstance(decoder, Decoder) else None
        if self._decoder is not None:
            decoder = self._decoder.name
        self.config = LoaderConfig(
            batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, seed=seed,
            num_threads=num_threads, prefetch=prefetch, decoder=resolve_decoder(decoder, output.device),
            on_error=on_error, rank=rank, world_size=world_size, output=output,
            augment=AugmentSpec(size=size, train=train, scale=tuple(scale), ratio=tuple(ratio),
                                crop_fraction=crop_fraction, flip=flip))
        self._pin = output.device.startswith("cuda") if pin_memory is None else bool(pin_memory)
        self.store = source if isinstance(source, Store) else open_dataset(source)
        if len(self.store) == 0:
            raise ValueError(f"{self.store.filename}: the data set is empty")
        self.stats = LoaderStats()
        self._epoch = 0
        self._epoch_begun = False   # an iteration of self._epoch has started
        self._start_batch = 0       # where the next iteration starts (set by load_state_dict)
        self._consumed = 0          # batches of self._epoch handed out
        self._ring = None
        self._pipeline = None       # DaliBatches when decoder == "dali"
        self._active = None         # the running iterator, closed on close() or a new iteration

    # -- DataLoader-like surface -----------------------------------------------------
    @property
    def dataset(self) -> Store:
        return self.store

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    @property
    def samples_per_rank(self) -> int:
        return -(-len(self.store) // self.config.world_size)

    def __len__(self) -> int:
        return batch_count(self.samples_per_rank, self.config.batch_size, self.config.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch of the next iteration (its permutation and crops). Setting the
        epoch a pending ``load_state_dict`` resumes keeps the resume position."""
        resuming = not self._epoch_begun and self._start_batch > 0
        if epoch != self._epoch or not resuming:
            self._epoch, self._start_batch = int(epoch), 0
        self._epoch_begun = False

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self._close_active()
        if self._epoch_begun:  # iterating again without set_epoch: the next epoch
            self._epoch, self._start_batch = self._epoch + 1, 0
        self._epoch_begun = True
        start, self._start_batch = self._start_batch, 0
        self._consumed = start
        c = self.config
        plan = EpochPlan(c.augment, c.seed, self._epoch, c.shuffle, c.batch_size, c.drop_last,
                         c.rank, c.world_size)
        self.stats = LoaderStats()
        batches = self._run_dali(plan, start) if c.decoder == "dali" else self._run_threads(plan, start)
        iterator = self._count(batches)
        # Held weakly: an iterator the caller drops is finalized at once, and its
        # ``finally`` joins the threads, so a ``break`` leaks nothing.
        self._active = weakref.ref(iterator)
        return iterator

    def _count(self, batches):
        try:
            for images, labels in batches:
                self._consumed += 1
                yield images, labels
        finally:
            batches.close()  # stops and joins the pipeline's threads, also on break or error
        self._epoch, self._consumed, self._epoch_begun = self._epoch + 1, 0, False

    # -- resume ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the loader stands: loading it makes the next iteration yield exactly the
        batches an uninterrupted run would have yielded next."""
        c = self.config
        batch = self._consumed if self._epoch_begun else self._start_batch
        return {"version": STATE_VERSION, "epoch": self._epoch, "batch": batch, "seed": c.seed,
                "shuffle": c.shuffle, "batch_size": c.batch_size, "world_size": c.world_size,
                "samples": len(self.store)}

    def load_state_dict(self, state: dict) -> None:
        c = self.config
        expected = {"seed": c.seed, "shuffle": c.shuffle, "batch_size": c.batch_size,
                    "world_size": c.world_size, "samples": len(self.store)}
        for key, value in expected.items():
            if state.get(key) != value:
                raise ValueError(f"cannot resume: the saved loader had {key}={state.get(key)!r}, "
                                 f"this one has {value!r}")
        self._close_active()
        self._epoch, self._start_batch = int(state["epoch"]), int(state["batch"])
        self._epoch_begun = False

    # -- pipelines -------------------------------------------------------------------
    def _run_threads(self, plan: EpochPlan, start: int):
        from .decoders import get_decoder
        from .pipeline.decode_queue import DecodeQueue
        from .pipeline.prefetcher import make_finisher
        from .pipeline.ring import BatchRing
        c = self.config
        if self._ring is None:  # allocated once: memory stays flat over epochs
            self._ring = BatchRing(c.prefetch + 2, c.batch_size, c.augment.size, self._pin)
            self._finisher = make_finisher(c.output, c.augment.size)
            self._decoder = self._decoder or get_decoder(c.decoder)
        finisher = self._finisher
        queue = DecodeQueue(self.store, self._decoder, self._ring,
                            plan.batches(self.store.labels, self.store.sizes, start), plan,
                            c.num_threads, c.on_error, self.stats,
                            converter=finisher if finisher.per_sample else None)
        try:
            if finisher.per_sample:
                yield from self._finished_on_host(queue)
            else:
                yield from self._prefetched(queue, finisher)
        finally:
            queue.close()

    def _next_filled(self, queue):
        t0 = time.perf_counter()
        batch = queue.next_filled(block=True)
        self.stats.add(wait_s=time.perf_counter() - t0)
        return batch

    def _finished_on_host(self, queue):
        """The decode threads already wrote each batch's output tensor."""
        while (batch := self._next_filled(queue)) is not None:
            labels = self._ring.labels[batch.slot, :len(batch.plan)].clone()
            queue.release(batch.slot)
            self.stats.add(images=len(labels), batches=1)
            yield batch.output, labels

    def _prefetched(self, queue, finisher):
        """Batch k+1 is copied and normalized on a side stream while step k runs."""
        ring, stats = self._ring, self.stats
        inflight = collections.deque()   # submitted to the prefetcher, not yet handed out
        copying = collections.deque()    # slots whose host-to-device copy may still run

        def submit(batch):
            n = len(batch.plan)
            t0 = time.perf_counter()
            pending = finisher.submit(ring.images[batch.slot, :n], ring.labels[batch.slot, :n], batch.slot)
            stats.add(copy_s=time.perf_counter() - t0)  # enqueue time: the copy itself is asynchronous
            copying.append(pending)
            inflight.append(pending)

        def release_copied(wait: bool):
            while copying and (wait or finisher.copied(copying[0])):
                finisher.wait_copied(copying[0])
                queue.release(copying.popleft().slot)

        try:
            while True:
                release_copied(wait=False)
                if not inflight:
                    release_copied(wait=True)  # workers need free slots to make progress
                    batch = self._next_filled(queue)
                    if batch is None:
                        return
                    submit(batch)
                ahead = queue.next_filled(block=False)  # overlap the next copy with this step
                if ahead is not None:
                    submit(ahead)
                images, labels = finisher.finish(inflight.popleft())
                stats.add(images=len(labels), batches=1)
                yield images, labels
        finally:
            release_copied(wait=True)  # no copy may still read a slot the workers refill

    def _run_dali(self, plan: EpochPlan, start: int):
        c = self.config
        if self._pipeline is None:
            from .pipeline.dali_pipeline import DaliBatches
            device = c.output.device
            device_id = torch.device(device).index if device.startswith("cuda") else None
            self._pipeline = DaliBatches(self.store, c.batch_size, c.output, c.num_threads,
                                         prefetch=c.prefetch, device_id=device_id, on_error=c.on_error,
                                         seed=c.seed, size=c.augment.size, spec=c.augment)
        stats = self.stats
        t0 = time.perf_counter()
        for images, labels in self._pipeline.run(plan.batches(self.store.labels, self.store.sizes, start)):
            stats.add(wait_s=time.perf_counter() - t0, images=len(labels), batches=1)
            yield images, labels
            t0 = time.perf_counter()
        stats.substituted = getattr(self._pipeline, "substituted", 0)

    # -- lifetime --------------------------------------------------------------------
    def _close_active(self) -> None:
        iterator = self._active() if self._active is not None else None
        if iterator is not None:
            iterator.close()  # runs the pipeline's finally: threads stopped and joined
        self._active = None

    def close(self) -> None:
        """Stop and join the decode threads, release the DALI pipeline and the store."""
        self._close_active()
        if self._pipeline is not None:
            self._pipeline.close()
            self._pipeline = None

    def __enter__(self) -> "FeedLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        return (f"FeedLoader({self.store.filename!r}, batch_size={c.batch_size}, decoder={c.decoder!r}, "
                f"threads={c.num_threads}, device={c.output.device!r}, {len(self)} batches/epoch)")
