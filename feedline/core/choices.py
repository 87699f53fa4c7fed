"""The choices of feedline's options, as Enums whose values are the strings users pass.

Each Enum is a ``str``: ``OnError("substitute")`` and ``OnError.SUBSTITUTE == "substitute"``
both hold, so a string is accepted wherever an Enum is expected. No torch here: the CLI
builds its parsers from these without importing it.
"""
from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """An Enum of strings that names the allowed values when given another one."""

    @classmethod
    def parse(cls, value, option: str):
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in cls)
            raise ValueError(f"{option} must be one of {allowed}, got {value!r}") from None

    def __str__(self) -> str:
        return self.value


class Engine(Choice):
    """Who produces the batches. The per-image codec of the CPU engine (threads or processes)
    is chosen apart, with ``decoder=`` (a name in feedline.decoders' open registry, or a Decoder)."""

    AUTO = "auto"        # dali on a CUDA device when DALI imports, else processes (threads for num_workers=0)
    THREADS = "threads"  # per-image decoders (decoder=) on CPU threads, a ring of batch buffers
    PROCESSES = "processes"  # the same decoders in worker processes writing into shared batch buffers
    DALI = "dali"        # one NVIDIA DALI pipeline: nvJPEG on a GPU, CPU operators without one
    GPU = "gpu"          # nvImageCodec on the GPU: nvJPEG / hardware decoder, crop regions


class OnError(Choice):
    """What the loader does with a record that cannot be read or decoded."""

    RAISE = "raise"            # stop with the record's index, path and reason
    SUBSTITUTE = "substitute"  # deliver another record in its place (a deterministic pick), log it


class Order(Choice):
    """Which order an epoch visits the records in."""

    SEQUENTIAL = "sequential"     # 0, 1, 2, ...: evaluation
    RANDOM = "random"             # a full random permutation per epoch
    QUASI_RANDOM = "quasi-random"  # page-aware: shuffled blocks of adjacent records, for data
                                   # bigger than RAM (contiguous reads, shuffled within a window)
    SHARDS = "shards"             # shard-aware: shards permuted and dealt to the ranks, records shuffled
                                  # within a window of a rank's shards (the default for a bucket)
