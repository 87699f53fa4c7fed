"""The DALI path of FeedLoader: one DALI pipeline decodes, crops, resizes, mirrors and
normalizes the batches feedline plans, so order, sharding, resume and labels stay feedline's.

DALI is imported when a ``DaliBatches`` is built, never at ``import feedline``.
"""
from __future__ import annotations

import io
import logging
from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Iterable, Iterator

import numpy as np
import torch

from ..augment import AugmentSpec
from ..errors import BackendUnavailable, DecodeError, StoreError
from .plan import BatchPlan, OutputSpec
from .substitute import MAX_ATTEMPTS, record_error, substitute_sample

log = logging.getLogger(__name__)

_INSTALL = "pip install nvidia-dali-cuda120 (or pip install 'feedline[dali]')"
_ON_ERROR = ("raise", "substitute")


def import_dali() -> SimpleNamespace:
    """The parts of DALI this module uses; BackendUnavailable when DALI is missing."""
    try:
        from nvidia.dali import fn, types
        from nvidia.dali.pipeline import Pipeline
        from nvidia.dali.plugin.pytorch import feed_ndarray
    except (ImportError, OSError) as exc:
        raise BackendUnavailable(f"decoder='dali' needs NVIDIA DALI, which cannot be imported ({exc}). "
                                 f"Install it with: {_INSTALL}") from None
    return SimpleNamespace(fn=fn, types=types, Pipeline=Pipeline, feed_ndarray=feed_ndarray)


@dataclass
class _Fed:
    """A batch handed to DALI: the plan as feedline made it and what was fed in its place."""
    plan: BatchPlan
    indices: np.ndarray   # records actually decoded (substitutes in place of bad records)
    labels: np.ndarray
    substituted: int


class DaliBatches:
    """Runs a DALI pipeline over BatchPlans; yields (images, labels) torch tensors.

    Images are N x 3 x H x W on ``output.device`` (channels_last memory if asked), H x W =
    ``spec.size`` (or ``size``; ``spec`` is needed to re-plan substitutes); labels are int64
    on the same device. ``device_id=None`` builds a CPU-only pipeline; an int decodes on that
    GPU ('mixed': nvJPEG plus the hardware JPEG decoder).

    Concurrency: DALI owns its worker threads (``num_threads``) and runs ``prefetch``
    batches ahead; feedline code runs only in the consumer's thread, where DALI calls
    ``_next_inputs`` to read the next batch's bytes from the store. One ``run`` at a time:
    starting another ends the previous one.
    """

    def __init__(self, store, batch_size: int, output: OutputSpec, num_threads: int, prefetch: int = 2,
                 device_id: int | None = None, on_error: str = "raise", seed: int = 0, *,
                 size: tuple[int, int] | None = None, spec: AugmentSpec | None = None):
        if batch_size < 1 or num_threads < 1 or prefetch < 1:
            raise ValueError(f"batch_size, num_threads and prefetch must be >= 1, "
                             f"got {batch_size}, {num_threads}, {prefetch}")
        if on_error not in _ON_ERROR:
            raise ValueError(f"on_error must be one of {_ON_ERROR}, got {on_error!r}")
        if spec is not None and not isinstance(spec, AugmentSpec):
            raise TypeError(f"spec must be an AugmentSpec, got {type(spec).__name__}")
        if spec is None and size is None:
            raise ValueError("pass spec= (the epoch plans' AugmentSpec) or at least size= (output H, W)")
        if spec is None and on_error == "substitute":
            raise ValueError("on_error='substitute' needs spec= (the epoch plans' AugmentSpec) "
                             "to plan the substitute's crop as the CPU path does")
        self.size = spec.size if spec is not None else AugmentSpec(size=size).size
        if size is not None and AugmentSpec(size=size).size != self.size:
            raise ValueError(f"size {size} disagrees with spec.size {self.size}")
        self.store, self.batch_size, self.num_threads, self.prefetch = store, batch_size, num_threads, prefetch
        self.device_id, self.on_error, self.seed, self.spec = device_id, on_error, seed, spec
        self.output = output
        self.device = _output_device(output, device_id)
        self.dtype = _output_dtype(output)
        self.substituted = 0
        self._dali = import_dali()
        self._pipe = None
        self._bad: dict[int, str] = {}   # records found undecodable; grows only with bad records
        self._source: Iterator[BatchPlan] | None = None
        self._refeed: deque[BatchPlan] = deque()   # plans to feed again after a pipeline rebuild
        self._inflight: deque[_Fed] = deque()      # fed to DALI, outputs not yet taken; oldest first
        self._stopping = False
        self._active = None
        self._closed = False

    # -- the pipeline --------------------------------------------------------------------

    def _build(self):
        d, out = self._dali, self.output
        types = d.types
        pipe = d.Pipeline(batch_size=self.batch_size, num_threads=self.num_threads, device_id=self.device_id,
                          prefetch_queue_depth=self.prefetch, exec_async=True, exec_pipelined=True,
                          exec_dynamic=True)
        # (x / 255 - mean) / std on the 0..1 scale is (x - 255 mean) / (255 std) on DALI's 0..255.
        normalize = out.mean is not None
        mean = [255.0 * m for m in out.mean] if normalize else [0.0]
        std = [255.0 * s for s in (out.std if out.std is not None else (1.0, 1.0, 1.0))] if normalize else [1.0]
        with pipe:
            jpegs, anchors, shapes, mirrors = d.fn.external_source(
                source=self._next_inputs, num_outputs=4, batch=True,
                dtype=[types.UINT8, types.INT32, types.INT32, types.INT32])
            # image_slice, not image_random_crop: the crop box is feedline's pure function of
            # (seed, epoch, index), so DALI crops exactly the CPU path's boxes (resume, sharding).
            # Store sizes ignore EXIF, as the CPU path does; on the GPU, nvJPEG upsamples chroma as
            # libjpeg-turbo does (fancy upsampling), so both paths give the same pixels.
            decode = {"device": "cpu"} if self.device_id is None else {"device": "mixed",
                                                                        "jpeg_fancy_upsampling": True}
            images = d.fn.decoders.image_slice(jpegs, anchors, shapes, axis_names="HW", output_type=types.RGB,
                                               adjust_orientation=False, **decode)
            images = d.fn.resize(images, size=list(self.size), antialias=True,
                                 interp_type=types.INTERP_LINEAR)
            images = d.fn.crop_mirror_normalize(
                images, mirror=mirrors, mean=mean, std=std, dtype=_dali_dtype(types, self.dtype),
                output_layout="HWC" if out.channels_last else "CHW")
            pipe.set_outputs(images)
        pipe.build()
        return pipe

    def _pipeline(self):
        if self._pipe is None:
            self._pipe = self._build()
        return self._pipe

    def _discard(self) -> None:
        # Dropping the last reference shuts DALI's threads down (Pipeline.__del__).
        self._pipe = None
        self._inflight.clear()

    def _next_inputs(self):
        """DALI's external_source callback: the next batch's inputs, StopIteration at the end."""
        if self._stopping or self._source is None:
            raise StopIteration
        plan = self._refeed.popleft() if self._refeed else next(self._source)
        if not 0 < len(plan) <= self.batch_size:
            raise ValueError(f"batch {plan.number} of epoch {plan.epoch} has {len(plan)} samples; "
                             f"DaliBatches takes 1..{self.batch_size}")
        fed, boxes, flips, encoded = self._prepare(plan)
        self._inflight.append(fed)
        return (encoded, boxes[:, :2].astype(np.int32), boxes[:, 2:].astype(np.int32),
                flips.astype(np.int32))

    def _prepare(self, plan: BatchPlan):
        indices, labels = plan.indices.copy(), plan.labels.copy()
        boxes, flips = plan.boxes.copy(), plan.flips.copy()
        encoded, substituted = [], 0
        for k, original in enumerate(plan.indices.tolist()):
            while True:
                if original in self._bad:
                    indices[k], boxes[k], flips[k] = self._substitute(plan.epoch, original)
                    labels[k] = self.store.labels[indices[k]]
                try:
                    # DALI copies the bytes when they are fed, before the store's buffer can change.
                    encoded.append(np.frombuffer(self.store.read(int(indices[k])), dtype=np.uint8))
                    break
                except StoreError as exc:
                    if self.on_error == "raise":
                        raise record_error(self.store, int(indices[k]), exc) from exc
                    self._mark_bad(int(indices[k]), str(exc))
            substituted += int(indices[k] != original)
        return _Fed(plan, indices, labels, substituted), boxes, flips, encoded

    # -- bad records -----------------------------------------------------------------------

    def _substitute(self, epoch: int, index: int):
        sizes = self.store.sizes
        for attempt in range(MAX_ATTEMPTS):
            sub, box, flip = substitute_sample(self.spec, self.seed, epoch, index, attempt, sizes)
            if sub not in self._bad:
                return sub, box, flip
        raise DecodeError(f"{self.store.filename}: record {index} ({self.store.path(index)}) cannot be "
                          f"decoded, and neither can its {MAX_ATTEMPTS} substitutes; check the data set",
                          index=index, path=self.store.path(index))

    def _mark_bad(self, index: int, reason: str) -> None:
        if index not in self._bad:
            self._bad[index] = reason
            log.warning("%s: record %d (%s) cannot be decoded (%s); substituting another record "
                        "(on_error='substitute')", self.store.filename, index, self.store.path(index), reason)

    def _check(self, index: int) -> str | None:
        """Why record ``index`` cannot be decoded as the store describes it, or None if it can."""
        from PIL import Image
        try:
            with Image.open(io.BytesIO(self.store.read(index))) as im:
                im.load()
                w, h = im.size
        except Exception as exc:  # PIL raises many types (OSError, SyntaxError, ValueError) on bad data
            return f"{type(exc).__name__}: {exc}"
        expected = self.store.size(index)
        if (h, w) != expected:
            return f"decodes to {h}x{w}, but the store records {expected[0]}x{expected[1]}"
        return None

    def _recover(self, exc: Exception):
        """DALI failed a batch and its pipeline is no longer valid: find the bad records of
        the batches in flight, then raise or substitute them and rebuild the pipeline."""
        failed = list(self._inflight)
        self._discard()
        found = []
        for fed in failed:  # the oldest is the batch DALI reported; look further only if it is clean
            found = [(i, why) for i in dict.fromkeys(fed.indices.tolist()) if (why := self._check(i))]
            if found:
                break
        if not found:
            plan = failed[0].plan if failed else None
            where = f"batch {plan.number} of epoch {plan.epoch}" if plan else "a batch"
            raise DecodeError(f"DALI failed on {where} ({_dali_reason(exc)}), but each of its records "
                              "decodes with PIL to the size the store records") from exc
        if self.on_error == "raise":
            raise record_error(self.store, *found[0]) from exc
        for index, why in found:
            self._mark_bad(index, why)
        self._refeed.extendleft(fed.plan for fed in reversed(failed))
        pipe = self._pipeline()
        pipe.schedule_run()
        return pipe

    # -- iteration ---------------------------------------------------------------------------

    def run(self, batches: Iterable[BatchPlan]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(images, labels) for each plan of ``batches``, in order. Ends the previous run."""
        if self._closed:
            raise RuntimeError("DaliBatches.run() after close()")
        if self._active is not None:
            self._active.close()
        self._active = self._iterate(iter(batches))
        return self._active

    def _iterate(self, source: Iterator[BatchPlan]):
        self._source, self._stopping = source, False
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
                images = self._to_torch(outputs[0])
                pipe.release_outputs()
                labels = torch.from_numpy(fed.labels.astype(np.int64)).to(self.device, non_blocking=True)
                self.substituted += fed.substituted
                pipe.schedule_run()  # DALI works on the next batch while the consumer trains
                yield images, labels
            pipe.reset()
            finished = True
        finally:
            if not finished:
                self._drain()
            self._source = None
            self._refeed.clear()

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
        return torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None

    def _to_torch(self, batch) -> torch.Tensor:
        """Copy DALI's output into a tensor torch owns, on the consumer's stream (device to
        device on the GPU), so torch's allocator governs its lifetime."""
        tensor = batch.as_tensor()
        native = self.dtype if self.dtype != torch.bfloat16 else torch.float32
        images = torch.empty(tensor.shape(), dtype=native, device=self.device)
        self._dali.feed_ndarray(tensor, images, cuda_stream=self._stream())
        if self.output.channels_last:
            images = images.permute(0, 3, 1, 2)  # NHWC memory seen as NCHW: channels_last, no copy
        return images.to(self.dtype) if images.dtype != self.dtype else images

    def close(self) -> None:
        if self._active is not None:
            self._active.close()
            self._active = None
        self._discard()
        self._closed = True

    def __enter__(self) -> "DaliBatches":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _output_device(output: OutputSpec, device_id: int | None) -> torch.device:
    device = torch.device(output.device)
    if device.type == "cpu":
        if device_id is not None:
            raise ValueError(f"device_id={device_id} decodes on the GPU, but OutputSpec.device is "
                             f"{output.device!r}; use device='cuda:{device_id}'")
        return device
    if device.type != "cuda":
        raise ValueError(f"OutputSpec.device must be 'cpu' or 'cuda[:N]', got {output.device!r}")
    if device_id is None:
        raise ValueError(f"OutputSpec.device is {output.device!r}, but device_id=None builds a CPU-only "
                         "DALI pipeline; pass device_id=N for output on cuda:N")
    if device.index is not None and device.index != device_id:
        raise ValueError(f"OutputSpec.device {output.device!r} disagrees with device_id={device_id}")
    if not torch.cuda.is_available():
        raise BackendUnavailable(f"device_id={device_id} needs CUDA, but torch sees no GPU "
                                 f"(torch {torch.__version__}); use device_id=None for the CPU pipeline")
    return torch.device("cuda", device_id)


def _output_dtype(output: OutputSpec) -> torch.dtype:
    """float32 by default, uint8 by default without normalization; float16 and bfloat16 too.
    Without ``mean`` a float dtype holds the unnormalized 0..255 values."""
    if output.dtype is None:
        return torch.uint8 if output.mean is None else torch.float32
    allowed = (torch.float32, torch.float16, torch.bfloat16) + ((torch.uint8,) if output.mean is None else ())
    if output.dtype not in allowed:
        raise ValueError(f"OutputSpec.dtype must be one of {[str(t) for t in allowed]} "
                         f"(uint8 only with mean=None), got {output.dtype!r}")
    return output.dtype


def _dali_reason(exc: Exception) -> str:
    """The informative line of a DALI error, which otherwise opens with the pipeline's
    traceback and ends with boilerplate."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("Current pipeline object", "C++ context"))]
    return lines[-1] if lines else repr(exc)


def _dali_dtype(types, dtype: torch.dtype):
    # DALI has no bfloat16: it writes float32 and torch converts on the output device.
    return {torch.uint8: types.UINT8, torch.float16: types.FLOAT16}.get(dtype, types.FLOAT)
