"""Resident memory of a FeedLoader over epochs, in a process of its own so that the
other loaders of the benchmark do not blur it.

    python bench/rss.py PACKED --epochs 5 --batch-size 64 --threads 2

prints one JSON object: ``rss_mib`` after each epoch (from /proc/self/statm) and
``growth_pct``, the growth from the end of epoch 1 (buffers allocated) to the last.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/rss.py`: the repository root, not bench/, on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[1])


def rss_bytes() -> int:
    """This process's resident set size, from /proc/self/statm (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_rss(packed: str, epochs: int, batch_size: int, threads: int, decoder: str = "auto",
                device: str = "cpu") -> dict:
    from feedline.loading.loader import FeedLoader
    rss, seconds, images = [], [], 0
    with FeedLoader(packed, batch_size=batch_size, shuffle=True, train=True, decoder=decoder,
                    num_workers=threads, device=device, drop_last=True) as loader:
        for _ in range(epochs):
            t0 = time.perf_counter()
            for batch, _labels in loader:
                images += len(batch)
            seconds.append(time.perf_counter() - t0)
            rss.append(rss_bytes())
    return {"epochs": epochs, "decoder": decoder, "images": images,
            "rss_mib": [r / 2**20 for r in rss], "epoch_s": seconds,
            "growth_pct": 100.0 * (rss[-1] - rss[0]) / rss[0] if rss else None}


def measure_rss_in_subprocess(packed: str, epochs: int, batch_size: int, threads: int,
                              decoder: str = "auto", device: str = "cpu", timeout: float = 1800) -> dict:
    """`measure_rss` in a fresh Python process; raises RuntimeError with its stderr on failure."""
    cmd = [sys.executable, str(Path(__file__).resolve()), str(packed), "--epochs", str(epochs),
           "--batch-size", str(batch_size), "--threads", str(threads), "--decoder", decoder, "--device", device]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the RSS measurement failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Resident memory of a FeedLoader over epochs (JSON on stdout).")
    p.add_argument("packed")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--decoder", default="auto")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    result = measure_rss(args.packed, args.epochs, args.batch_size, args.threads, args.decoder, args.device)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
