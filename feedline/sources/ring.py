"""The ring of Slots the CPU engine fills: ``prefetch + 2`` of them, each made whole with its
memory, so memory stays constant however long the run.

Each Slot's images live in an arena (arena.py) that every worker maps, as the rows a
RowFormat describes: the host batch the consumer receives, written normalized by the
workers (``writes_normalized``), or uint8 pixels for the Finisher to normalize; for a CUDA
Finisher (or ``pin_memory``) the arena is pinned in place (host_pinning.py), so the
host-to-device copy is asynchronous. Labels and targets sit beside it, pinned where it is.

On the host the consumer may keep a batch as long as it likes: a Slot is written again
only when nothing else holds its tensors (PyTorch counts the users of a tensor's memory);
one still held is made anew, with a new arena, and the kept tensors are the consumer's
alone. The batch the consumer holds and the one before it are lent; the other
``prefetch`` Slots are being filled meanwhile. Pixels for a CUDA Finisher are reused as
they are, once their copy has finished.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..core.config import OutputSpec
from .arena import Arena
from .cuda_finisher import device_batches_bytes
from .host_memory import available_host_bytes
from .host_pinning import HostPinning
from .normalization import normalize_table
from .rows import RowFormat
from .slot import Slot
from .target_batches import TargetSpec
from .workers import Workers

# Output dtypes a worker writes normalized (numpy has them); others get uint8 pixels,
# normalized per batch by the Finisher.
_NUMPY_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.uint8: "uint8"}
GIB = 1024 ** 3


def ring_slots(prefetch: int) -> int:
    """The Slots of the ring: the ``prefetch`` batches filled ahead and two more, the batch
    the consumer holds and the one before it."""
    return prefetch + 2


def memory_users(tensor: torch.Tensor) -> int | None:
    """How many tensors (and storages) share ``tensor``'s memory; None where PyTorch does not say."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return None if count is None else count(tensor.untyped_storage()._cdata)


def writes_normalized(output: OutputSpec) -> bool:
    """Whether the workers write the batch the host consumer receives (else uint8 pixels)."""
    return not output.on_cuda and output.dtype in _NUMPY_DTYPES


def row_format(output: OutputSpec, batch_size: int, size: tuple[int, int], masks: bool = False) -> RowFormat:
    """The rows of one Slot's arena; ``masks``: the masks after the pixels, in ``output.mask_dtype``."""
    mask_dtype = str(output.mask_dtype).removeprefix("torch.") if masks else None
    if not writes_normalized(output):
        return RowFormat(batch_size, tuple(size), mask_dtype=mask_dtype)
    table = normalize_table(output.mean, output.std) if output.mean is not None else None
    return RowFormat(batch_size, tuple(size), _NUMPY_DTYPES[output.dtype], output.channels_last, table, mask_dtype)


@dataclass(frozen=True)
class RingSpec:
    """The ring's shape: the batches made ahead, their size and where their memory is read."""

    prefetch: int
    batch_size: int
    output: OutputSpec
    pin: bool               # pinned for copies to a CUDA device (always for a CUDA output)
    masks: bool = False     # the workers write each batch's masks beside its pixels

    @property
    def slots(self) -> int:
        return ring_slots(self.prefetch)

    def host_bytes(self, size: tuple[int, int]) -> int:
        """The host memory of the CPU engine's Slots at ``size``."""
        return self.slots * row_format(self.output, self.batch_size, size, self.masks).nbytes

    def check_fits(self, size: tuple[int, int], host_ring: bool) -> None:
        """MemoryError, with the sizes, when the batch buffers at ``size`` cannot fit: the
        Slots on the host (``host_ring``: the CPU engine's), and on a CUDA device the batches
        prepared ahead and the one in use. Asked before anything is allocated."""
        h, w = size
        what, advice = f"batch_size={self.batch_size} at {h}x{w}", "use a smaller batch_size (or size, or prefetch)"
        need, free = (self.host_bytes(size) if host_ring else 0), available_host_bytes()
        if need and free is not None and need > free:
            raise MemoryError(f"{what}: the batch buffers need about {need / GIB:,.1f} GiB of memory ({self.slots} "
                              f"batches of {need / self.slots / GIB:,.2f} GiB for prefetch={self.prefetch}), "
                              f"but {free / GIB:,.1f} GiB is available; {advice}")
        output = self.output
        need = device_batches_bytes(self.prefetch, self.batch_size * h * w * 3, output,
                                    self.batch_size * h * w if self.masks else 0)
        if need:
            free = torch.cuda.mem_get_info(torch.device(output.device))[0]
            if need > free:
                masks = f" with masks in {output.mask_dtype}" if self.masks else ""
                raise MemoryError(f"{what}: the batches on {output.device} need about {need / GIB:,.1f} GiB "
                                  f"({self.prefetch + 1} batches in {output.dtype}{masks}), but "
                                  f"{free / GIB:,.1f} GiB is free there; {advice}")


class Ring:
    """Makes the Slot of each ring position; ``reuse_held=False`` makes a position's Slot
    anew whenever anything besides the ring holds one of its tensors. ``on_made()`` is
    called each time a Slot made anew has taken its position."""

    def __init__(self, slots: int, size: tuple[int, int], make: Callable[[int], Slot], reuse_held: bool,
                 on_made: Callable[[], None] = lambda: None):
        self.slots, self.size = slots, tuple(size)
        self.fresh = 0                     # slots made anew because the old tensors were held
        self._make, self._reuse_held, self._on_made = make, reuse_held, on_made
        # each position's Slot, with the users of each of its tensors when the ring alone held them
        self._made: list[tuple[Slot, list[int | None]] | None] = [None] * slots

    def slot(self, number: int) -> Slot:
        """Slot ``number``, ready to be planned into."""
        made = self._made[number]
        if made is None or (not self._reuse_held and self._held(*made)):
            self.fresh += made is not None
            slot = self._make(number)
            # One store: a Ctrl-C leaves the old Slot in place or the new one, never a mix of the two.
            self._made[number] = made = (slot, [memory_users(t) for t in slot.tensors()])
            self._on_made()
        return made[0]

    def made(self) -> list[Slot]:
        """The Slots in the ring's positions."""
        return [made[0] for made in self._made if made is not None]

    @staticmethod
    def _held(slot: Slot, alone: list[int | None]) -> bool:
        """Whether anything besides the ring holds a tensor of ``slot`` (True when PyTorch cannot tell)."""
        now = [memory_users(t) for t in slot.tensors()]
        return any(u is None or a is None or u > a for u, a in zip(now, alone, strict=True))


class ArenaRing:
    """The ring's Slots at one size, each in an arena of its own that every worker maps.
    A Slot made anew gets a new arena; the workers then forget every arena no Slot of the
    ring is in (the old one; one given for a Slot that a Ctrl-C cut short), whose memory
    goes when the consumer lets go of it."""

    def __init__(self, spec: RingSpec, size: tuple[int, int], workers: Workers, targets: TargetSpec | None,
                 pinning: HostPinning | None = None):
        """``pinning``: the one that pins the arenas (each ring of a loader shares it); made here when
        ``spec.pin`` and none is given."""
        if pinning is None and spec.pin:
            pinning = HostPinning(spec.output.device if spec.output.on_cuda else "cuda")
        self.spec, self.workers, self.targets, self.pinning = spec, workers, targets, pinning
        self.format = row_format(spec.output, spec.batch_size, size, spec.masks)
        self._numbers = itertools.count()
        self.ring = Ring(spec.slots, size, self._make, reuse_held=spec.output.on_cuda,
                         on_made=self._forget_unused)

    def _make(self, number: int) -> Slot:
        fmt, spec = self.format, self.spec
        arena = Arena(fmt.nbytes, shared=self.workers.shares_memory)
        arena_number = next(self._numbers)
        self.workers.give_arena(arena_number, fmt, arena)
        if self.pinning is not None:
            whole = self.pinning.tensor(arena.memory, fmt.nbytes)
        else:
            whole = torch.frombuffer(arena.memory, dtype=torch.uint8, count=fmt.nbytes)
        image_bytes = int(np.prod(fmt.shape)) * np.dtype(fmt.dtype).itemsize
        images = whole[:image_bytes].view(getattr(torch, fmt.dtype)).view(fmt.shape)
        if not spec.output.on_cuda and fmt.channels_last:
            images = images.permute(0, 3, 1, 2)   # N x C x H x W in channels_last memory
        labels = torch.empty(spec.batch_size, dtype=torch.int64, pin_memory=spec.pin)
        targets = self.targets.allocate(spec.pin) if self.targets else None
        if fmt.mask_dtype is not None:   # written by the workers beside the pixels, handed over as they are
            masks = whole[fmt.mask_offset:fmt.nbytes].view(getattr(torch, fmt.mask_dtype)).view(fmt.mask_shape)
            targets = {**(targets or {}), "mask": masks}
        return Slot(number, images, labels, targets, fmt.size, arena=arena_number)

    def _forget_unused(self) -> None:
        """The workers forget every arena no Slot of the ring is in (the workers serve one ring)."""
        self._forget_all_but({slot.arena for slot in self.ring.made()})

    def _forget_all_but(self, kept: set[int]) -> None:
        for number in sorted(self.workers.arena_numbers() - kept):
            self.workers.drop_arena(number)

    def resized(self, size: tuple[int, int]) -> "ArenaRing":
        """A ring at ``size`` in place of this one (a size schedule moved), this one's arenas
        dropped first: memory is that of the current size, never the sum of all sizes."""
        self._forget_all_but(set())
        return ArenaRing(self.spec, size, self.workers, self.targets, self.pinning)
