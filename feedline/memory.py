"""Whether a loader's batch buffers fit, asked before they are allocated: a batch size
too large for the machine is then one line that says what is needed and what there is,
not the allocator's error from deep inside the engine."""
from __future__ import annotations

import torch

from .config import LoaderConfig
from .sources import engine_type
from .sources.ring import ring_slots

GIB = 1024 ** 3


def batch_pixels(config: LoaderConfig) -> int:
    h, w = config.augment.size
    return config.batch_size * h * w * 3


def host_bytes(config: LoaderConfig) -> int:
    """The host memory of the engine's buffers, as the engine declares it."""
    return engine_type(config.engine).buffer_bytes(config)[0]


def device_bytes(config: LoaderConfig) -> int:
    """The memory of its buffers on a CUDA device, as the engine declares it."""
    return engine_type(config.engine).buffer_bytes(config)[1]


def available_host_bytes() -> int | None:
    """Memory this process can still take: MemAvailable, capped by its cgroup's limit less
    the cgroup's working set (its usage but the page cache it would give back first)."""
    found = []
    meminfo = _read("/proc/meminfo")
    for line in (meminfo or "").splitlines():
        if line.startswith("MemAvailable:"):
            found.append(int(line.split()[1]) * 1024)
    limit, used = _read("/sys/fs/cgroup/memory.max"), _read("/sys/fs/cgroup/memory.current")
    if limit and used and limit.strip().isdigit():
        stat = dict(line.split() for line in (_read("/sys/fs/cgroup/memory.stat") or "").splitlines()
                    if len(line.split()) == 2)
        found.append(int(limit) - int(used) + int(stat.get("inactive_file", 0)))
    return min(found) if found else None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def check_buffers_fit(config: LoaderConfig) -> None:
    """MemoryError, with the sizes, when the batch buffers cannot fit."""
    h, w = config.augment.size
    what = f"batch_size={config.batch_size} at {h}x{w}"
    advice = "use a smaller batch_size (or size, or prefetch)"
    host, device = engine_type(config.engine).buffer_bytes(config)   # asked once: what the engine allocates
    need, free = host, available_host_bytes()
    if need and free is not None and need > free:
        slots, batch = ring_slots(config.prefetch), batch_pixels(config) / GIB
        raise MemoryError(f"{what}: the batch buffers need about {need / GIB:,.1f} GiB of memory ({slots} uint8 "
                          f"batches of {batch:,.2f} GiB for prefetch={config.prefetch}, and the batch delivered), "
                          f"but {free / GIB:,.1f} GiB is available; {advice}")
    need = device
    if need:
        free = torch.cuda.mem_get_info(torch.device(config.output.device))[0]
        if need > free:
            raise MemoryError(f"{what}: the batches on {config.output.device} need about {need / GIB:,.1f} GiB "
                              f"({config.prefetch + 1} batches in {config.output.dtype}), but "
                              f"{free / GIB:,.1f} GiB is free there; {advice}")
