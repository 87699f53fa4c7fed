"""DaliBatches: one NVIDIA DALI pipeline decodes, crops, resizes, mirrors and normalizes the
batches feedline plans, so order, sharding, resume, labels and bad-record handling stay
feedline's (see dali_graph for the pipeline itself)."""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np
import torch

from ..decoders.base import whole_pixel_boxes
from ..core.errors import DecodeError
from ..planning.plan import BatchPlan, EpochPlan
from ..core.stats import LoaderStats
from .dali_graph import PipelineSpec, build_pipeline, dali_reason, import_dali, to_torch
from .finisher import HostFinisher
from .known_bad import KnownBad
from .policy import BadRecordPolicy, BadRecords
from .slot import Slot, made_slot
from .target_batches import TargetSpec

log = logging.getLogger(__name__)


@dataclass
class _Fed:
    """A batch handed to DALI: the plan as feedline made it and the labels of what was fed."""
    plan: BatchPlan
    indices: np.ndarray   # records actually decoded (substitutes in place of bad records)
    labels: np.ndarray


class DaliBatches:
    """A BatchSource on DALI: device 'mixed' (nvJPEG and the hardware JPEG decoder) on a CUDA
    output device, CPU operators otherwise.

    Concurrency: DALI owns its worker threads and runs ``prefetch`` batches ahead; feedline
    code runs only in the consumer's thread, where DALI calls ``_next_inputs`` to read the
    next batch's bytes. Bad records: a read or checksum failure is found when the batch is
    fed; a decode failure makes DALI fail the batch, after which the batches in flight are
    checked record by record with feedline's CPU decoder, the bad ones remembered, and the
    batches fed again with their substitutes (the rule every source shares).
    """

    def __init__(self, store, pipeline: PipelineSpec, transformed: bool, targets: TargetSpec | None,
                 bad_records: BadRecords, finisher: HostFinisher):
        """``transformed``: transforms follow the pipeline, which then makes uint8 pixels."""
        self.store, self.pipeline, self._transformed = store, pipeline, transformed
        self._dali = import_dali()
        self._pipe = None
        self._bad = KnownBad(store)
        self._policy: BadRecordPolicy | None = None   # the run's rule for bad records
        self._plans: Iterator[BatchPlan] | None = None
        self._refeed: deque[BatchPlan] = deque()  # plans to feed again after a pipeline rebuild
        self._inflight: deque[_Fed] = deque()     # fed to DALI, outputs not yet taken; oldest first
        self._stopping = False
        self._targets, self._bad_records, self.finisher = targets, bad_records, finisher
        self._made: PipelineSpec | None = None   # what the pipeline makes

    # -- feeding -------------------------------------------------------------------------

    def _next_inputs(self):
        """DALI's external_source callback: the next batch's inputs, StopIteration at the end."""
        if self._stopping or self._plans is None:
            raise StopIteration
        plan = self._refeed.popleft() if self._refeed else next(self._plans)
        fed, boxes, flips, encoded = self._prepare(plan)
        self._inflight.append(fed)
        crops = whole_pixel_boxes(boxes)   # evaluation crops are floats
        return encoded, crops[:, :2].astype(np.int32), crops[:, 2:].astype(np.int32), flips.astype(np.int32)

    def _prepare(self, plan: BatchPlan):
        indices, labels = plan.indices.copy(), plan.labels.copy()
        boxes, flips = plan.boxes.copy(), plan.flips.copy()
        encoded, read = [], self._bad.read
        for k, index in enumerate(plan.indices.tolist()):
            try:
                data = read(index, self._policy)
            except Exception as exc:  # known bad, or a read or checksum failure: as in every engine
                indices[k], boxes[k], flips[k], data = self._policy.replace(
                    plan, k, exc, lambda other, box, flip: (other, box, flip, read(other, self._policy)))
                labels[k] = self.store.labels[indices[k]]
            encoded.append(data)
        return _Fed(plan, indices, labels), boxes, flips, encoded

    def _recover(self, exc: Exception):
        """DALI failed a batch and its pipeline is no longer valid: find the bad records of
        the batches in flight, raise or remember them, and rebuild the pipeline."""
        failed = list(self._inflight)
        self._discard()
        for fed in failed:  # the oldest is the batch DALI reported; look further only if it is clean
            found = [(k, i, why) for k, i in enumerate(fed.indices.tolist()) if (why := self._bad.check(i))]
            if found:
                break
        else:
            where = f"batch {failed[0].plan.number} of epoch {failed[0].plan.epoch}" if failed else "a batch"
            raise DecodeError(f"DALI failed on {where} ({dali_reason(exc)}), but each of its records "
                              "decodes on the CPU to the size the store records") from exc
        for k, index, why in found:
            if self._policy.raises:
                self._policy.fail(fed.plan, k, why)
            self._bad.found(index, why, self._policy)
        self._refeed.extendleft(f.plan for f in reversed(failed))
        pipe = self._pipeline()
        pipe.schedule_run()
        return pipe

    # -- iteration ---------------------------------------------------------------------------

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self._policy = self._bad_records.policy(epoch, stats.ledger)
        if self._made is None or tuple(epoch.spec.size) != self._made.size:  # a size schedule moved
            self._discard()
            self._made = made_by_pipeline(self.pipeline, epoch.spec.size, pixels=self._transformed)
        self._plans = epoch.batches(self.store.labels, self.store.sizes, start)
        self._stopping = False
        self._refeed.clear()
        self._inflight.clear()
        finished = False
        try:
            pipe = self._pipeline()
            pipe.schedule_run()  # the first call fills the prefetch queue
            while True:
                try:
                    outputs = pipe.share_outputs(self._stream())
                except StopIteration:
                    break
                except RuntimeError as exc:  # DALI's report of a failed batch
                    pipe = self._recover(exc)
                    continue
                fed = self._inflight.popleft()
                images = to_torch(self._dali, outputs[0], self._made.output, self._stream())
                pipe.release_outputs()
                batch = self.finisher.finish(filled_slot(images, fed, epoch, self.store, self._targets))
                pipe.schedule_run()  # DALI works on the next batch while the consumer trains
                yield self.finisher.hand_over(batch)
            pipe.reset()
            finished = True
        finally:
            if not finished:
                self._drain()
            self._plans = None
            self._refeed.clear()

    def _pipeline(self):
        if self._pipe is None:
            self._pipe = build_pipeline(self._dali, self._made, self._next_inputs)
        return self._pipe

    def _discard(self) -> None:
        # Dropping the last reference shuts DALI's threads down (Pipeline.__del__).
        self._pipe = None
        self._inflight.clear()

    def _drain(self) -> None:
        """Take the batches still in flight so the pipeline can be reused; drop it on failure."""
        pipe = self._pipe
        if pipe is None:
            return
        self._stopping = True
        try:
            pipe.schedule_run()  # our callback ends the epoch; DALI then returns what is in flight
            while True:
                try:
                    pipe.share_outputs()
                except StopIteration:
                    break
                pipe.release_outputs()
            pipe.reset()
            self._inflight.clear()
        except Exception:  # a failed or half-scheduled pipeline cannot be reused: build anew
            log.debug("dropping the DALI pipeline after an interrupted run", exc_info=True)
            self._discard()
        finally:
            self._stopping = False

    def _stream(self):
        output = self.pipeline.output
        return torch.cuda.current_stream(torch.device(output.device)) if output.on_cuda else None

    def close(self) -> None:
        self._discard()


def made_by_pipeline(spec: PipelineSpec, size: tuple[int, int], pixels: bool) -> PipelineSpec:
    """What the pipeline makes: ``size`` (a size schedule's, this epoch); uint8 pixels when
    transforms follow it (they take pixels, then normalize as every engine does)."""
    made = replace(spec, size=tuple(size))
    if pixels:
        made = replace(made, output=replace(made.output, mean=None, dtype=None, channels_last=True))
    return made


def filled_slot(images: torch.Tensor, fed: _Fed, epoch: EpochPlan, store, targets) -> Slot:
    """DALI's images of ``fed`` as a Slot, with the labels and targets of the records decoded
    (a substitute brings its own)."""
    labels = torch.from_numpy(fed.labels.astype(np.int64))
    made = targets.batch(fed.indices, epoch, store.sizes) if targets is not None else None
    return made_slot(fed.plan, images, labels, made, fed.indices)
