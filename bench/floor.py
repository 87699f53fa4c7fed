"""The decode floor: how fast this machine's cores could decode only the pixels that
the training crops need, if nothing else cost anything. It is the best single-thread
region-decode rate over the region decoders present, times the thread count.

A loader at 1.0x the floor spends all its cores decoding and nothing on reading,
resizing, normalizing or batching; the target is 0.9x. The crops are drawn the way
torchvision's RandomResizedCrop draws them (bench.baselines.rrc_params), so the floor
depends on neither feedline's augmentation nor its decoders.
"""
from __future__ import annotations

import dataclasses
import statistics
import threading
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


class RegionDecodePool:
    """The same region decode over a pool of threads, one decoder per thread: how far
    the single-thread rate x threads is reachable on this machine."""

    def __init__(self, name: str, threads: int):
        from concurrent.futures import ThreadPoolExecutor
        self.name, self.threads = name, threads
        self.factory = REGION_DECODERS[name][1]
        self.local = threading.local()
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-floor")

    def _decode(self, item: tuple[bytes, Box]):
        decode = getattr(self.local, "decode", None)
        if decode is None:
            decode = self.local.decode = self.factory()
        return decode(*item)

    def time(self, images: Sequence[bytes], boxes: Sequence[Box]) -> FloorMeasurement:
        items = list(zip(images, boxes))
        list(self.pool.map(self._decode, items[:2 * self.threads]))   # warm-up: the threads make their decoders
        t0 = time.perf_counter()
        for _ in self.pool.map(self._decode, items, chunksize=max(1, len(items) // (8 * self.threads))):
            pass
        return FloorMeasurement(f"{self.name} x{self.threads} threads", len(items), time.perf_counter() - t0)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def floor_row(name: str, passes: dict[str, list[FloorMeasurement]], reasons: dict[str, str], threads: int) -> dict:
    """The table row of the floor: the best region decoder's median single-thread rate,
    times ``threads`` (per pass: that pass's rate x threads)."""
    single = {decoder: statistics.median(p.images_per_s for p in runs) for decoder, runs in passes.items() if runs}
    row = {"name": name, "threads": threads, "device": "cpu", "available": bool(single),
           "reason": None if single else "no region decoder: " + "; ".join(f"{k}: {v}" for k, v in reasons.items()),
           "single_thread_images_per_s": single, "unavailable_decoders": reasons, "measurements": [],
           "description": "best single-thread region decode x threads (none available)"}
    if single:
        best = max(single, key=single.get)
        row.update(decoder=best, measurements=[dataclasses.asdict(p) for p in passes[best]],
                   rates=[p.images_per_s * threads for p in passes[best]],
                   description=f"{REGION_DECODERS[best][0]}, 1 thread {single[best]:.0f} img/s x {threads}")
    return row


def pool_row(name: str, decoder: str, passes: list[FloorMeasurement], threads: int) -> dict:
    """The table row of the same region decode over a pool of ``threads`` threads."""
    return {"name": name, "threads": threads, "device": "cpu", "available": True, "reason": None,
            "decoder": decoder, "measurements": [dataclasses.asdict(p) for p in passes],
            "rates": [p.images_per_s for p in passes],
            "description": f"{REGION_DECODERS[decoder][0]} over a pool of {threads} threads, one decoder each "
                           f"(for reference: how far 1 thread x {threads} scales here)"}
