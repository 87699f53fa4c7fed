"""Whether the GPU may decode JPEG regions, and the crop that replaces it when not.

nvImageCodec 0.9's GPU region decode (a sub-code-stream with a region, which
``engine="gpu"`` and DALI's ``decoders.image_slice`` both use) is broken for ordinary,
in-bounds regions (NVIDIA/nvImageCodec#55, open): the process dies with SIGSEGV on compute
capability 9.0 (H100, H200) and 10.0 (B200), and the decode fails with an internal error on
8.0 (A100) and the GB200/GB300; 0.8 works. DALI 2.3 and 2.4 require nvImageCodec 0.9, so
the rule, on every GPU:

  nvImageCodec 0.9.x: region decode unsafe; any other version: safe.

Where it is unsafe, the GPU decodes the whole image and the crop is cut on the device (a
view, no copy): slower for small crops of large images, never a crash. FeedLoader's
``region_decode`` overrides the rule: False never decodes regions on the GPU, True always
does (once a fixed nvImageCodec is out), None applies the rule (the CLI and the GPU check
read FEEDLINE_GPU_REGION_DECODE=0/1/auto into it). The choice is logged once per process. CPU decoding (DALI's CPU pipeline, libjpeg-turbo) is unaffected.
"""
from __future__ import annotations

import functools
import logging

import torch

from ..decoders.base import Box
from .gpu_splice import GridSplice, RegionStreams, image_tensor

log = logging.getLogger(__name__)

BROKEN_SERIES = ((0, 9),)   # nvImageCodec release series whose GPU region decode crashes or fails


def region_decode_safe(nvimgcodec_version: str | None, capability: tuple[int, int] | None = None,
                       choice: bool | None = None) -> tuple[bool, str]:
    """(safe, why) for GPU region decoding with this nvImageCodec on a GPU of this compute
    capability, unless ``choice`` (the loader's ``region_decode``) says."""
    if choice is not None:
        return bool(choice), f"region_decode={bool(choice)}"
    device = f"compute capability {capability[0]}.{capability[1]}" if capability else "this GPU"
    if nvimgcodec_version is None:
        return True, "nvImageCodec version unknown"
    try:
        series = tuple(int(x) for x in nvimgcodec_version.split(".")[:2])
    except ValueError:
        return True, f"nvImageCodec version {nvimgcodec_version!r} not understood"
    if series in BROKEN_SERIES:
        return False, (f"nvImageCodec {nvimgcodec_version} on {device}: its GPU region decode crashes or fails "
                       "(NVIDIA/nvImageCodec#55)")
    return True, f"nvImageCodec {nvimgcodec_version} on {device}"


def region_decode_choice(setting: str | None) -> bool | None:
    """``region_decode`` from a setting's text ("0", "1", "auto" or unset): what the CLI and
    the GPU check read from FEEDLINE_GPU_REGION_DECODE."""
    choice = (setting or "auto").strip().lower()
    if choice not in ("0", "1", "auto"):
        raise ValueError(f"FEEDLINE_GPU_REGION_DECODE={setting!r}: expected 0, 1 or auto")
    return None if choice == "auto" else choice == "1"


def nvimgcodec_version() -> str | None:
    """The installed nvImageCodec's version, from its package metadata (no import)."""
    from importlib import metadata
    for dist in ("nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12", "nvidia-nvimgcodec-cu11"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def gpu_region_decode(device: torch.device | int | None, choice: bool | None = None) -> bool:
    """Whether to decode regions on ``device`` (a CUDA device); logs the choice once."""
    capability = torch.cuda.get_device_capability(device) if torch.cuda.is_available() else None
    safe, why = region_decode_safe(nvimgcodec_version(), capability, choice)
    _log_choice(safe, why)
    return safe


@functools.lru_cache(maxsize=None)
def _log_choice(safe: bool, why: str) -> None:
    if safe:
        log.info("GPU region decode in use (%s)", why)
    else:
        log.warning("GPU region decode off: whole images are decoded and cropped on the GPU (%s; pass "
                    "region_decode=True to force it)", why)


def crop_on_device(image, box: Box, device: torch.device) -> torch.Tensor | None:
    """The crop ``box`` of a wholly decoded image (an nvImageCodec image or an array) as a
    tensor view; None when the image is smaller than the box, which sends the sample to
    the CPU fallback."""
    if image is None:
        return None
    whole = image if isinstance(image, torch.Tensor) else image_tensor(image, device)
    if whole.ndim != 3 or box.top + box.height > whole.shape[0] or box.left + box.width > whole.shape[1]:
        return None
    return whole[box.top:box.top + box.height, box.left:box.left + box.width]


class WholeImages:
    """Crop streams where GPU region decode is unsafe: each record decoded whole, its crop cut
    on the device. Not thread-safe, as the other crop streams (gpu_splice.py)."""

    def __init__(self, nv, device: torch.device | str, fallback=None):
        self._nv, self._device, self.fallback = nv, torch.device(device), fallback
        self._boxes: dict[int, Box] = {}   # sample -> its crop box in the whole image

    def begin(self) -> None:
        """A new batch: forget the boxes of one whose decode failed before ``crops``."""
        self._boxes = {}

    def stream(self, k: int, data, box: Box):
        stream = self._nv.CodeStream(data)
        self._boxes[k] = box
        return stream

    def crops(self, images: list) -> list:
        boxes, self._boxes = self._boxes, {}
        for k, box in boxes.items():   # only samples given a stream: never a CPU substitute
            images[k] = crop_on_device(images[k], box, self._device)
        return images


def crop_streams(store, output, region_decode: bool | None = None) -> "RegionStreams | GridSplice | WholeImages":
    """The crop streams for the GPU engine reading ``store`` onto ``output.device``: a grid
    store's spliced MCUs, else regions where GPU region decode is safe (or ``region_decode``
    says so), else whole images."""
    from ..decoders import get_decoder
    from ..decoders.grid_decoder import grid_decoder_for
    from ..decoders.jpeg_grid import is_grid_store
    from ..decoders.nvimgcodec_library import load_nvimgcodec
    nv, cpu, device = load_nvimgcodec(), get_decoder("auto"), torch.device(output.device)
    if is_grid_store(store):
        return GridSplice(nv, device, grid_decoder_for(store, cpu))   # refuses a damaged grid as the splice does
    if gpu_region_decode(device, region_decode):
        return RegionStreams(nv, cpu)
    return WholeImages(nv, device, cpu)
