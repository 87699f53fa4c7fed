"""A loader under measurement is a `LoaderStream`: an endless iterator of (images,
labels) batches over epochs, its ``close`` and (if it keeps any) its own counters.

`start` starts one, checks that its first batch is the common work (N x 3 x 224 x 224
float32) and warms it up; `measure` times a number of batches and counts the images
they hold.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class LoaderStream:
    batches: Batches
    close: Callable[[], None]
    stats: Callable[[], dict | None] = lambda: None   # the loader's own counters, if it keeps any


def forever(make_epoch: Callable[[], object]) -> Batches:
    """Batches from epoch after epoch of ``make_epoch()`` (an iterable of batches)."""
    while True:
        empty = True
        for batch in make_epoch():
            empty = False
            yield batch
        if empty:
            raise RuntimeError("an epoch yielded no batch: the data set is smaller than one batch "
                               "(drop_last); use a smaller --batch-size or more images")


def to_device(stream: Batches, device: str) -> Batches:
    """The CPU batches of a baseline moved to the GPU, as a training step would need them."""
    if not device.startswith("cuda"):
        yield from stream
        return
    for images, labels in stream:
        yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def closer(stream) -> Callable[[], None]:
    def close():
        stream.close()   # GeneratorExit reaches the loader's own iterator, which stops its workers
        gc.collect()
    return close


def plain_stream(batches: Batches, device: str) -> LoaderStream:
    """A LoaderStream over a baseline's CPU batches, moved to ``device``."""
    stream = to_device(batches, device)
    return LoaderStream(stream, closer(stream))


def start(name: str, make: Callable[[], LoaderStream], batch_size: int, warmup: int) -> LoaderStream:
    """``make()``, its first batch checked, then ``warmup - 1`` more batches consumed.
    Raises (and closes what started) when it cannot run or does other work."""
    stream = make()
    try:
        images, labels = next(stream.batches)
        if (tuple(images.shape) != (batch_size, 3, 224, 224) or images.dtype != torch.float32
                or len(labels) != batch_size):
            raise RuntimeError(f"{name} gave {tuple(images.shape)} {images.dtype}, expected "
                               f"({batch_size}, 3, 224, 224) float32: not the same work")
        for _ in range(max(warmup - 1, 0)):
            next(stream.batches)
    except BaseException:
        stream.close()
        raise
    return stream


def measure(stream: Batches, batches: int, drain: int, device: str) -> dict:
    """The images delivered in ``batches`` batches and the seconds they took, after
    ``drain`` untimed batches (what the loader buffered while the others ran)."""
    for _ in range(drain):
        next(stream)
    _sync(device)
    images = 0
    t0 = time.perf_counter()
    for _ in range(batches):
        batch, _labels = next(stream)
        images += len(batch)
    _sync(device)
    return {"images": images, "seconds": time.perf_counter() - t0}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
