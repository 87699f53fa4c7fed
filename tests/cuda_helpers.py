"""What the CUDA tests share: a spin kernel that keeps a stream busy for a while, so a
missing wait or a memory reuse shows as wrong pixels instead of hiding behind fast work."""
from __future__ import annotations

import torch

_cycles_per_ms: list[float] = []


def hold(ms: float, stream: torch.cuda.Stream | None = None) -> None:
    """Queue a spin kernel of about ``ms`` milliseconds on ``stream`` (the current one)."""
    if not _cycles_per_ms:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        end.synchronize()
        _cycles_per_ms.append(10_000_000 / max(start.elapsed_time(end), 1e-3))
    with torch.cuda.stream(stream or torch.cuda.current_stream()):
        torch.cuda._sleep(int(ms * _cycles_per_ms[0]))
