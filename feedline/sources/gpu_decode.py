"""GpuDecodeBatches: nvImageCodec decodes each batch's crop regions on the GPU (nvJPEG's
CUDA decoder, and the hardware JPEG decoder of A100/H100/H200 where present), then torch
resizes, mirrors and normalizes them there. Same crops, flips, labels and bad-record
rule as every source; only the decoding moves. Where GPU region decode is unsafe
(``gpu_region``), whole images are decoded and cropped on the GPU instead.

Ordering (torchvision#9606, torchcodec#1634): on H100/H200 the hardware decoder writes
its output without waiting for work already queued on the stream it is given, so memory
that queued kernels still read could be overwritten. Here the decoder only ever writes
into images nvImageCodec allocated for this call, and before each decode call the side
stream is drained (a host barrier on feedline's own stream, never the training stream),
and the previous batch's decoded images are released only after that: no queued kernel
can read memory the decoder might be handed.
"""
from __future__ import annotations

import time
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from ..decoders.base import Box, whole_pixels
from ..planning.plan import BatchPlan, EpochPlan
from ..core.stats import LoaderStats
from .background import ahead
from .cuda_finisher import CudaFinisher
from .fill import MaskSpec
from .gpu_masks import batch_masks
from .normalization import layout_of
from .policy import BadRecordPolicy, BadRecords
from .slot import Slot, made_slot
from .target_batches import TargetSpec


class GpuDecodeBatches:
    """A BatchSource on nvImageCodec's GPU decoders.

    Concurrency: one producer thread (``background.ahead``) reads a batch's bytes (checksums
    checked), decodes its regions on the GPU and finishes the batch on a side stream,
    ``prefetch`` batches ahead of the consumer; the consumer's stream waits on each batch's
    event. Records nvJPEG cannot decode (not JPEG, CMYK, 12-bit) are decoded on the CPU
    by feedline's CPU decoder and uploaded; a record neither can decode is a bad record.
    """

    def __init__(self, store, workers: int, prefetch: int, targets: TargetSpec | None, bad_records: BadRecords,
                 finisher: CudaFinisher, crops, masks: MaskSpec | None = None):
        """``workers``: nvImageCodec's CPU threads; ``prefetch``: batches made ahead; ``finisher``:
        a CudaFinisher, on whose stream decoding runs, so finishing follows it; ``masks``: the
        store's masks, cut out on the host and resized on the device (gpu_masks.py)."""
        self._masks = masks
        from ..decoders.nvimgcodec_library import load_nvimgcodec
        nv = load_nvimgcodec()
        self.store, self.prefetch, self.output = store, prefetch, finisher.output
        self.device = torch.device(self.output.device)
        self._decoder = nv.Decoder(device_id=self.device.index or 0, max_num_cpu_threads=workers,
                                   backends=[nv.Backend(nv.HW_GPU_ONLY), nv.Backend(nv.GPU_ONLY),
                                             nv.Backend(nv.HYBRID_CPU_GPU)])
        self._params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.SRGB)
        self._crops = crops               # gpu_splice: a region of each record, or a grid store's spliced MCUs
        self._cpu = crops.fallback        # the CPU decoder for what the GPU cannot decode
        self._targets, self._bad = targets, bad_records
        self.finisher, self._stream = finisher, finisher.stream

    # -- one batch, on the producer thread --------------------------------------------

    def _read(self, plan: BatchPlan, policy: BadRecordPolicy):
        """Per sample: (index, bytes, box, flip, label), substitutes in place of records whose
        bytes cannot be read."""
        samples = []
        for k, index in enumerate(plan.indices.tolist()):
            box, flip = whole_pixels(Box(*plan.boxes[k])), bool(plan.flips[k])   # evaluation crops: floats
            try:
                samples.append((index, self.store.read_checked(index), box, flip, int(plan.labels[k])))
            except Exception as exc:  # a read or checksum failure: a bad record, as in every engine
                samples.append(policy.replace(plan, k, exc, self._cpu_sample))
        return samples

    def _cpu_sample(self, index: int, box, flip: bool):
        """A substitute as a sample, decoded on the CPU (which proves it decodes) and cropped."""
        image = self._cpu_crop(self.store.read_checked(index), whole_pixels(Box(*box)))
        return index, image, Box(0, 0, *image.shape[:2]), flip, self.store.label(index)

    def _cpu_crop(self, data, box: Box) -> np.ndarray:
        """The crop of a record decoded on the CPU, as H x W x 3 uint8 (already cropped)."""
        return np.ascontiguousarray(self._cpu.decode(data)[box.top:box.top + box.height,
                                                           box.left:box.left + box.width])

    def _decode(self, samples) -> list:
        """Each sample's crop as a CUDA or host image; None where the GPU could not decode."""
        streams, where = [], []
        self._crops.begin()   # a new batch, nothing left from one that failed
        for k, (_, data, box, _, _) in enumerate(samples):
            if isinstance(data, np.ndarray):   # a substitute, already decoded on the CPU
                continue
            try:
                stream = self._crops.stream(k, data, box)
            except Exception:  # not a format nvImageCodec parses: the CPU decoder will say
                continue
            streams.append(stream)
            where.append(k)
        self._stream.synchronize()  # see the module docstring: nothing queued may read decoder memory
        decoded = self._decoder.decode(streams, params=self._params, cuda_stream=self._stream.cuda_stream) \
            if streams else []
        images = [data if isinstance(data, np.ndarray) else None for _, data, _, _, _ in samples]
        for k, image in zip(where, decoded):
            images[k] = image
        return self._crops.crops(images)

    def _fill(self, plan: BatchPlan, policy: BadRecordPolicy, stats: LoaderStats, epoch: EpochPlan) -> Slot:
        """The Slot of ``plan``: its crops resized and flipped on the device, as float pixels on
        the 0..255 scale, the labels and targets of the records decoded."""
        t0 = time.perf_counter()
        samples = self._read(plan, policy)
        t1 = time.perf_counter()
        images = self._decode(samples)
        stats.add(read_s=t1 - t0, decode_s=time.perf_counter() - t1)  # decode: enqueue and host-side time
        h, w = epoch.spec.size
        with torch.cuda.stream(self._stream):
            batch = torch.empty((len(samples), 3, h, w), dtype=torch.float32, device=self.device,
                                memory_format=layout_of(self.output))
            labels = torch.empty(len(samples), dtype=torch.int64)
            decoded = np.empty(len(samples), dtype=np.int64)   # the records delivered, substitutes included
            for k, (index, data, box, flip, label) in enumerate(samples):
                image = images[k]
                if image is None:  # nvJPEG could not: decode this record on the CPU
                    try:
                        image = self._cpu_crop(data, box)
                    except Exception as exc:
                        index, image, _, flip, label = policy.replace(plan, k, exc, self._cpu_sample)
                decoded[k] = index
                crop = torch.as_tensor(image, device=self.device).permute(2, 0, 1).unsqueeze(0).float()
                resized = F.interpolate(crop, size=(h, w), mode="bilinear", antialias=True, align_corners=False)
                batch[k] = resized[0].flip(-1) if flip else resized[0]
                labels[k] = label
            # each record's own targets, through its own crop and flip
            targets = self._targets.batch(decoded, epoch, self.store.sizes) if self._targets is not None else None
            if self._masks is not None:
                targets["mask"] = batch_masks(self.store, self._masks, decoded, epoch, self.device,
                                              self.output.mask_dtype)
        return made_slot(plan, batch, labels, targets, decoded), images   # images: alive until the next decode call

    # -- the protocol -------------------------------------------------------------------

    def run(self, epoch: EpochPlan, start: int, stats: LoaderStats) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        policy = self._bad.policy(epoch, stats.ledger)
        finish = self.finisher.finish
        finished = ((finish(slot), decoded) for slot, decoded in
                    (self._fill(plan, policy, stats, epoch)
                     for plan in epoch.batches(self.store.labels, self.store.sizes, start)))
        for batch, _ in ahead(finished, self.prefetch, "feedline-gpu-decode"):
            yield self.finisher.hand_over(batch)

    def close(self) -> None:
        """Nothing outlives a run: the decoder and the stream are freed with this object."""
