"""What make_source builds once and hands to the engine it makes: the transforms, the
targets beyond the label, the rule for bad records, and the Finisher that finishes the
engine's Slots. No engine builds any of these itself."""
from __future__ import annotations

from dataclasses import dataclass

from .finisher import HostFinisher
from .policy import BadRecords
from .target_batches import TargetSpec
from .transforming import Transforming


@dataclass(frozen=True)
class EngineParts:
    transforming: Transforming | None    # None: no transforms beyond the crop and flip
    targets: TargetSpec | None           # None: the label alone, delivered as it always was
    bad_records: BadRecords
    finisher: "HostFinisher | object"    # a HostFinisher or a CudaFinisher (cuda_finisher.py)
