"""The decode floor: how fast this machine's cores could decode only the pixels that
the training crops need, if nothing else cost anything. It is the best single-thread
region-decode rate over the region decoders present, times the thread count.

A loader at 1.0x the floor spends all its cores decoding and nothing on reading,
resizing, normalizing or batching; the target is 0.9x. The crops are drawn the way
torchvision's RandomResizedCrop draws them (bench.baselines.rrc_params), so the floor
depends on neither feedline's augmentation nor its decoders.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

from bench.common import quiet_stderr

Box = tuple[int, int, int, int]   # top, left, height, width
RegionDecode = Callable[[bytes, Box], object]


@dataclass(frozen=True)
class FloorMeasurement:
    """One timed single-thread pass of one region decoder."""

    decoder: str
    images: int
    seconds: float

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds


def crop_boxes(images: Sequence[bytes], seed: int = 0) -> list[Box]:
    """A RandomResizedCrop box (scale 0.08-1, ratio 3/4-4/3) for each encoded image."""
    import torch

    from bench.baselines import rrc_params
    from bench.decoder_backends import image_size
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return [rrc_params(*image_size(data)) for data in images]
    finally:
        torch.random.set_rng_state(state)


def nvimgcodec_region() -> RegionDecode:
    """nvImageCodec on the CPU (its bundled libjpeg-turbo): decode only the box."""
    with quiet_stderr():
        from nvidia import nvimgcodec
    decoder = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY,
                                 backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
    params = nvimgcodec.DecodeParams(color_spec=nvimgcodec.ColorSpec.SRGB)

    def decode(data: bytes, box: Box):
        top, left, height, width = box
        region = nvimgcodec.Region(top, left, top + height, left + width)
        stream = nvimgcodec.CodeStream(data).get_sub_code_stream(region=region)
        return decoder.decode(stream, params=params).cpu()
    return decode


# name -> (what it does, a factory of its single-thread decode function)
REGION_DECODERS: dict[str, tuple[str, Callable[[], RegionDecode]]] = {
    "nvimgcodec-region": ("nvImageCodec CPU region decode (libjpeg-turbo 3.1)", nvimgcodec_region),
}


def open_region_decoders() -> tuple[dict[str, RegionDecode], dict[str, str]]:
    """The region decoders that start here, and for the others the reason."""
    opened, reasons = {}, {}
    for name, (_, factory) in REGION_DECODERS.items():
        try:
            opened[name] = factory()
        except Exception as exc:  # not installed or not usable here: reported, not fatal
            reasons[name] = f"{type(exc).__name__}: {exc}"
    return opened, reasons


def time_region_decode(name: str, decode: RegionDecode, images: Sequence[bytes],
                       boxes: Sequence[Box]) -> FloorMeasurement:
    """One single-thread pass decoding every image's box."""
    t0 = time.perf_counter()
    for data, box in zip(images, boxes):
        decode(data, box)
    return FloorMeasurement(name, len(images), time.perf_counter() - t0)
