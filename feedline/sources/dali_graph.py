"""The DALI side of DaliBatches: importing DALI, the pipeline graph, and its outputs as
torch tensors. DALI is imported when a pipeline is built, never at ``import feedline``."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch

from ..core.config import OutputSpec
from ..core.errors import BackendUnavailable
from .normalization import pixel_mean_std
from .gpu_region import gpu_region_decode

INSTALL = "pip install nvidia-dali-cuda130 (or, from a feedline clone, pip install '.[dali]')"


def import_dali() -> SimpleNamespace:
    """The parts of DALI used here; BackendUnavailable, saying how to install it, when missing."""
    try:
        from nvidia.dali import fn, types
        from nvidia.dali.pipeline import Pipeline
        from nvidia.dali.plugin.pytorch import feed_ndarray
    except (ImportError, OSError) as exc:
        raise BackendUnavailable(f"decoder='dali' needs NVIDIA DALI, which cannot be imported ({exc}). "
                                 f"Install it with: {INSTALL}") from None
    return SimpleNamespace(fn=fn, types=types, Pipeline=Pipeline, feed_ndarray=feed_ndarray)


@dataclass(frozen=True)
class PipelineSpec:
    """What a DALI pipeline makes: batches of ``size`` for ``output`` on ``workers`` threads,
    ``prefetch`` ahead. ``region_decode``: on a GPU, decode only each crop's region (False:
    whole images, then the crops: same pixels; None: where known safe, gpu_region.py)."""

    batch_size: int
    workers: int
    prefetch: int
    output: OutputSpec
    size: tuple[int, int]
    region_decode: bool | None = None

    @property
    def device_id(self) -> int | None:
        """The GPU DALI decodes on, or None for its CPU-only pipeline."""
        return torch.device(self.output.device).index if self.output.on_cuda else None


def build_pipeline(dali: SimpleNamespace, spec: PipelineSpec, inputs: Callable):
    """A built pipeline that takes (jpegs, crop anchors, crop shapes, mirror flags) per batch
    from ``inputs`` and gives the finished images: decode the crop, resize, mirror, normalize.
    On the CPU it decodes regions; on a GPU as ``spec.region_decode`` says."""
    out, types, fn = spec.output, dali.types, dali.fn
    device_id = spec.device_id
    region_decode = device_id is None or gpu_region_decode(device_id, spec.region_decode)
    pipe = dali.Pipeline(batch_size=spec.batch_size, num_threads=spec.workers, device_id=device_id,
                         prefetch_queue_depth=spec.prefetch, exec_async=True, exec_pipelined=True,
                         exec_dynamic=True)
    stats = pixel_mean_std(out)  # DALI normalizes on its 0..255 scale
    mean, std = (stats[0].tolist(), stats[1].tolist()) if stats is not None else ([0.0], [1.0])
    with pipe:
        jpegs, anchors, shapes, mirrors = fn.external_source(
            source=inputs, num_outputs=4, batch=True, dtype=[types.UINT8, types.INT32, types.INT32, types.INT32])
        # image_slice, not image_random_crop: the crop box is feedline's pure function of
        # (seed, epoch, index), so DALI crops exactly the other sources' boxes (resume, sharding).
        # Store sizes ignore EXIF, as every decoder here does; on the GPU, nvJPEG upsamples
        # chroma as libjpeg-turbo does (fancy upsampling), so both give the same pixels.
        decode = {"device": "cpu"} if device_id is None else {"device": "mixed", "jpeg_fancy_upsampling": True}
        if region_decode:
            images = fn.decoders.image_slice(jpegs, anchors, shapes, axis_names="HW", output_type=types.RGB,
                                             adjust_orientation=False, **decode)
        else:   # region decode unsafe on this GPU (gpu_region): the whole image, then the crop
            images = fn.decoders.image(jpegs, output_type=types.RGB, adjust_orientation=False, **decode)
            images = fn.slice(images, anchors, shapes, axis_names="HW")
        images = fn.resize(images, size=list(spec.size), antialias=True, interp_type=types.INTERP_LINEAR)
        images = fn.crop_mirror_normalize(images, mirror=mirrors, mean=mean, std=std,
                                          dtype=dali_dtype(types, out.dtype),
                                          output_layout="HWC" if out.channels_last else "CHW")
        pipe.set_outputs(images)
    pipe.build()
    return pipe


def to_torch(dali: SimpleNamespace, batch, output: OutputSpec, stream) -> torch.Tensor:
    """Copy DALI's output into a tensor torch owns, on the consumer's stream (device to device
    on the GPU), so torch's allocator governs its lifetime."""
    tensor = batch.as_tensor()
    dtype = output.dtype
    native = {torch.uint8: torch.uint8, torch.float16: torch.float16}.get(dtype, torch.float32)
    images = torch.empty(tensor.shape(), dtype=native, device=output.device)
    dali.feed_ndarray(tensor, images, cuda_stream=stream)
    if output.channels_last:
        images = images.permute(0, 3, 1, 2)  # NHWC memory seen as NCHW: channels_last, no copy
    return images.to(dtype) if images.dtype != dtype else images


def dali_reason(exc: Exception) -> str:
    """The informative line of a DALI error, which otherwise opens with the pipeline's
    traceback and ends with boilerplate."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("Current pipeline object", "C++ context"))]
    return lines[-1] if lines else repr(exc)


def dali_dtype(types, dtype: torch.dtype):
    # DALI has no bfloat16 (or float64): it writes float32 and torch converts on the output device.
    return {torch.uint8: types.UINT8, torch.float16: types.FLOAT16}.get(dtype, types.FLOAT)
