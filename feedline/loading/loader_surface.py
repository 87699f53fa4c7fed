"""What code written for a DataLoader reads from FeedLoader besides its batches: ``dataset``,
``batch_size``, ``sampler`` and ``batch_sampler`` (PyTorch Lightning reads the last two, and
calls ``sampler.set_epoch(epoch)`` at each epoch's start).

``dataset`` is the loader's records as a map-style dataset. ``dataset[i]`` is what
torchvision's ImageFolder gives: the decoded image as an RGB PIL image (no crop, no
transform; the pixels `feedline pack` stored) and its target: the class index for a store
with only labels, else the record's targets as plain values (boxes and keypoints in the
stored image's pixels; `Store.targets`)."""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

import torch.utils.data

from ..fields import LABEL_ONLY
from ..stores import Store


class LoaderDataset(torch.utils.data.Dataset):
    """A Store seen as a dataset; every other attribute is the store's (``classes``,
    ``fields``, ``class_lists``, ``read``, ``path``...)."""

    def __init__(self, store: Store):
        self.store = store

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, index: int):
        from PIL import Image   # pillow: a dependency, imported when a record is asked for
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"{self.store.filename}: a record's index is an int, got {type(index).__name__}")
        n = len(self.store)
        if not -n <= index < n:
            raise IndexError(f"{self.store.filename}: record {index} is out of range (the store has {n})")
        index %= n
        with Image.open(io.BytesIO(bytes(self.store.read_checked(index)))) as image:
            rgb = image.convert("RGB")
        if self.store.fields == LABEL_ONLY:
            return rgb, self.store.label(index)
        return rgb, self.store.targets(index)

    def __getattr__(self, name: str):
        if name == "store":   # not yet set (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.store, name)

    def __repr__(self) -> str:
        return f"LoaderDataset({self.store.filename!r}, {len(self.store)} records)"


@dataclass(frozen=True)
class EpochSetter:
    """``FeedLoader.sampler``: a sampler's ``set_epoch``, the loader's own."""

    set_epoch: Callable[[int], None]


class DataLoaderSurface:
    """FeedLoader's DataLoader attributes, from its ``store``, ``config`` and ``set_epoch``."""

    batch_sampler = None   # DataLoader's, None beside a sampler: Lightning reads both

    @property
    def dataset(self) -> LoaderDataset:
        return LoaderDataset(self.store)

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    @property
    def sampler(self) -> EpochSetter:
        return EpochSetter(self.set_epoch)
