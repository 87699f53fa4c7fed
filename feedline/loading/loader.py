"""FeedLoader: the one-line replacement for torch.utils.data.DataLoader over images.

It holds three things: the configuration (LoaderConfig, checked once), where it stands
(a Position: the epoch and the batches of it already delivered, which ``state_dict``
saves), and one BatchSource that turns an epoch's plans into batches.
"""
from __future__ import annotations

import logging
import os
import time
import weakref
from dataclasses import replace
from typing import Iterator

import torch

from ..planning.augment import AugmentSpec
from ..core.choices import Engine, Order
from ..core.config import UNSET, LoaderConfig, OrderSpec, OutputSpec, TransformSpec, distributed_position
from ..decoders.base import Decoder
from .keywords import (augment_spec, check_source_kind, checks_keywords, choose_order, choose_pinning, choose_workers,
                       order_spec, output_spec, transform_spec)
from .loader_surface import DataLoaderSurface
from ..planning.order import batch_count
from ..planning.plan import EpochPlan
from ..planning.position import Position, resume_position, state_of
from ..planning.seeds import loader_seed
from ..decoders.selection import resolve_engine_and_decoder
from ..planning.size_schedule import schedule_of
from ..sources import make_source
from ..core.stats import LoaderStats
from ..stores import Store, is_remote, open_dataset, shard_counts, will_visit

log = logging.getLogger(__name__)

class FeedLoader(DataLoaderSurface):
    """Yields ``(images, labels)``: images N x 3 x H x W, normalized with ``mean``/``std``
    (uint8 when ``mean=None``), in ``dtype`` and channels_last memory, on ``device``;
    labels int64 on ``device`` (a store with other fields: that field's tensor or a dict; README "Targets").

    ``source``: a packed .lmdb/.h5 file, shards (a local or s3:// index), an image folder, or a Store.
    ``engine``: "processes" (per-image decoders in worker processes), "threads" (the same on
    threads here), "dali", "gpu" (nvImageCodec) or "auto" (dali on CUDA with DALI, else processes;
    threads for num_workers=0). ``decoder``: the per-image codec ("auto", "nvimgcodec", "turbojpeg", "simplejpeg",
    "opencv", "pil", a name from feedline.decoders.register_decoder, or a Decoder).
    ``augment=AugmentSpec(...)`` (the crop and flip; or its loose ``size`` and ``train``),
    ``output=OutputSpec(...)`` (or its loose ``mean``, ``std``, ``dtype``), ``transforms``
    (a list, or ``TransformSpec(...)`` with ``batch_transforms``), ``order`` ("sequential",
    "random", "quasi-random", "shards", or ``OrderSpec(...)`` with the rank's share): each group one
    way. ``order`` decides the order when given; ``shuffle`` may then be left out or must
    agree with it. ``num_workers``: the worker processes (0: one worker thread in this process) ("auto": the usable
    cores split over torchrun's ranks on this node, ``LOCAL_WORLD_SIZE``, at least one; a number is
    kept, up to the cores). ``timeout`` (engine="processes" only): seconds the due batch's workers
    may go silent before a WorkerError names each and its record (0: forever). ``region_decode``
    (gpu, dali): decode only each crop's region (None: where known safe). Order, crops and flips
    are pure functions of (seed, epoch, index): the same batches for any worker count or engine
    (``seed=None``: drawn from torch's global generator, as DataLoader draws its sampler's; rank
    0's under torch.distributed); ``state_dict()`` resumes mid-epoch exactly. One iteration runs at a time: a new
    ``iter(loader)`` ends the previous one, which then raises. README: transforms, size per epoch, targets.
    """

    @checks_keywords
    def __init__(self, source: str | os.PathLike | Store, batch_size: int = 256, shuffle: bool | None = None,
                 train: bool = UNSET, size: int | tuple[int, int] = UNSET, *, engine: str | Engine = "auto",
                 decoder: str | Decoder = "auto", augment: AugmentSpec | None = None,
                 output: OutputSpec | None = None, transforms: TransformSpec | list | tuple = (),
                 order: str | Order | OrderSpec | None = None, num_workers: int | str = "auto",
                 device: str | torch.device | None = None, dtype: torch.dtype | None = UNSET, mean=UNSET,
                 std=UNSET, drop_last: bool = False, seed: int | None = None, prefetch: int = 2, on_error: str = "raise",
                 pin_memory: bool | None = None, persistent_workers: bool | None = None, timeout: float = 0,
                 region_decode: bool | None = None):
        del persistent_workers  # DataLoader's: needs nothing here, the workers and buffers persist anyway
        self.store, order = open_source(source), order_spec(order)
        chosen_order = checked_order(self.store, shuffle, order)
        rank, world_size = distributed_position(order.rank, order.world_size)
        output = output_spec(output, device, mean=mean, std=std, dtype=dtype)
        augment = augment_spec(augment, size=size if (schedule := schedule_of(size)) is None else schedule.at(0),
                               train=train)
        chosen = resolve_engine_and_decoder(engine, decoder, output.device, self.store, num_workers=num_workers)
        self.config = LoaderConfig(
            batch_size=batch_size, order=chosen_order, drop_last=drop_last, seed=loader_seed(seed, world_size, chosen_order),
            num_workers=choose_workers(num_workers), prefetch=prefetch, engine=chosen.engine,
            decoder=chosen.decoder_name, on_error=on_error, output=output, rank=rank, world_size=world_size,
            even_shards=order.even_shards, quasi_random=order.quasi_random, pin_memory=choose_pinning(pin_memory),
            augment=augment, size_schedule=schedule, transforms=transform_spec(transforms), timeout=timeout,
            region_decode=region_decode)
        self._decoder, self._seed_drawn = chosen.decoder, seed is None   # a drawn seed gives way to a saved one
        self.source = make_source(self.store, self.config, self._decoder)
        self.stats = LoaderStats()
        self._position, self._started = Position(), False  # _started: this epoch delivered a batch
        self._active = None  # the running iterator, held weakly; ended on close() or a new iteration

    # -- DataLoader-like surface (and DataLoaderSurface) ----------------------------------
    @property
    def samples_per_rank(self) -> int:
        n, c = len(self.store), self.config
        if c.even_shards:
            return -(-n // c.world_size)
        return len(range(c.rank, n, c.world_size))

    def __len__(self) -> int:
        return batch_count(self.samples_per_rank, self.config.batch_size, self.config.drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch of the next iteration (its order and crops). Setting the epoch
        that a pending ``load_state_dict`` resumes keeps its position."""
        if self._started or int(epoch) != self._position.epoch:
            self._position = Position(int(epoch), 0)
        self._started = False

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self._close_active()
        if self._started:  # again without set_epoch, after a batch (not Lightning's set-up iter()): next epoch
            self._position, self._started = Position(self._position.epoch + 1, 0), False
        c = self.config
        epoch = plan_epoch(self.store, c, self._position)
        self.stats = LoaderStats()
        iterator = EpochIterator(self._deliver(epoch))
        # Held weakly: an iterator the caller drops is finalized at once, and closing it
        # stops the source's work, so a ``break`` leaks nothing.
        self._active = weakref.ref(iterator)
        return iterator

    def _deliver(self, epoch: EpochPlan):
        stats = self.stats
        batches = self.source.run(epoch, self._position.batch, stats)
        try:
            while True:
                t0 = time.perf_counter()
                try:
                    images, labels = next(batches)
                except StopIteration:
                    break
                stats.add(wait_s=time.perf_counter() - t0, images=len(images), batches=1)
                self._position, self._started = replace(self._position, batch=self._position.batch + 1), True
                yield images, labels
            self._position, self._started = Position(epoch.epoch + 1, 0), False
        finally:
            batches.close()  # stops the source's work for this epoch, also on break or error
            if stats.ledger.substituted:
                log.warning("%s", stats.ledger.summary(self.store.filename))

    # -- resume ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the loader stands: loaded, the next batches are those an uninterrupted run yields."""
        return state_of(self.config, len(self.store), self._position)

    def load_state_dict(self, state: dict | list[dict]) -> None:
        """One rank's state (same world_size, batch_size), or every rank's: any topology (position.py)."""
        position, seed = resume_position(state, self.config, len(self.store), self._seed_drawn)
        self._close_active("load_state_dict() moved the loader")
        if seed != self.config.seed:   # the source holds the seed: built again with the saved one
            self.source.close()
            self.config = replace(self.config, seed=seed)
            self.source = make_source(self.store, self.config, self._decoder)
        self._position, self._started = position, False

    def batches_left(self) -> int:
        """Batches left where the loader stands (after load_state_dict: what the next iteration yields)."""
        return plan_epoch(self.store, self.config, self._position, hint=False).count(len(self.store)) - self._position.batch

    # -- lifetime --------------------------------------------------------------------
    def _close_active(self, why: str = "a second iter(loader) started a new iteration") -> None:
        iterator = self._active() if self._active is not None else None
        if iterator is not None:
            iterator.retire(why)
        self._active = None

    def close(self) -> None:
        """Stop the running iteration and release the source's threads and buffers."""
        self._close_active("the loader was closed")
        self.source.close()
        will_visit(self.store, ())   # nothing more: a remote store stops fetching ahead

    def __enter__(self) -> "FeedLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        c = self.config
        decoder = f", decoder={c.decoder!r}" if c.decoder is not None else ""
        return (f"FeedLoader({self.store.filename!r}, batch_size={c.batch_size}, engine={c.engine.value!r}"
                f"{decoder}, workers={c.num_workers}, device={c.output.device!r}, {len(self)} batches/epoch)")


def plan_epoch(store: Store, c: LoaderConfig, position: Position, hint: bool = True) -> EpochPlan:
    """The plan of ``position``'s epoch. The store hears which records come next (``hint``):
    a remote store fetches their shards ahead."""
    epoch = EpochPlan(c.spec_at(position.epoch), c.seed, position.epoch, c.order, c.batch_size, c.drop_last,
                      c.rank, c.world_size, c.even_shards, *c.quasi_random, shard_counts(store), position.resumed)
    if hint and is_remote(store):   # the samples cost a permutation: computed for the stores that use them
        will_visit(store, epoch.samples(len(store))[position.batch * c.batch_size:])
    return epoch


class EpochIterator:
    """One iteration's batches. Once the loader starts another iteration (or is closed,
    or loads a state), this one is stale: using it raises instead of ending silently."""

    def __init__(self, batches):
        self._batches, self._stale = batches, None

    def __iter__(self) -> "EpochIterator":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._stale is not None:
            raise RuntimeError(f"this FeedLoader iterator was ended: {self._stale}. A FeedLoader runs one "
                               "iteration at a time; take the batches from the newest iter(loader)")
        return next(self._batches)

    def retire(self, why: str) -> None:
        self._stale = why
        self.close()

    def close(self) -> None:
        self._batches.close()


def open_source(source) -> Store:
    """The store FeedLoader reads; a TypeError that says what it takes for anything else, a
    ValueError for an empty one."""
    check_source_kind(source)
    store = source if isinstance(source, Store) else open_dataset(source)
    if len(store) == 0:
        raise ValueError(f"{store.filename}: the data set is empty")
    return store


def checked_order(store: Store, shuffle: bool | None, order: OrderSpec) -> Order:
    """The order of DataLoader's ``shuffle`` and ``order`` (keywords.choose_order), with a
    warning for a quasi-random order over a store packed class by class."""
    chosen = choose_order(shuffle, order.order, is_remote(store))
    if chosen is Order.QUASI_RANDOM:
        warn_if_class_sorted(store, order.quasi_random)
    return chosen


def warn_if_class_sorted(store, quasi_random: tuple[int, int]) -> None:
    """Quasi-random order draws each batch from one window of neighbouring blocks; in a
    store packed class by class (the default: sorted paths) a window smaller than the
    data set then spans few classes, which costs accuracy (bench/order_quality.py)."""
    import numpy as np
    block, window = quasi_random
    labels = np.asarray(store.labels)
    if block * window >= len(labels):  # one window holds the store (and block, window >= 1: two records or more)
        return
    if float(np.mean(labels[1:] == labels[:-1])) >= 0.5:
        log.warning("%s: order='quasi-random' reads windows of %d records from a store packed class by "
                    "class, so each batch holds few classes, which costs accuracy. Pack it in a shuffled "
                    "order (`feedline pack SRC OUT --shuffle SEED`), or use order='random' if it fits in "
                    "memory", store.filename, block * window)
