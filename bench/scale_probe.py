"""One fresh process's measurements of one store, for bench/scale.py; prints one JSON object.

    python bench/scale_probe.py STORE --batches K --batch-size B --size S --threads T

Fresh, so that opening starts from nothing (no environment, map or column already held)
and the memory it holds is what opening added. Imports come first: RAM is measured
around ``open_dataset`` alone. Every time is the median of its repeats unless it is a
first (opening, first batch), which happens once per process by nature.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])


def rss_anon() -> int:
    """Bytes of anonymous memory (not the file's pages that a map shares with the page cache)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def drop_from_page_cache(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def held_bytes(store) -> int:
    """The per-record arrays a store keeps: columns, and HDF5's offsets."""
    cols = store.columns
    arrays = [cols.labels, cols.sizes, cols.path_offsets, cols.path_bytes, cols.checksums,
              getattr(store, "offsets", None)]
    return sum(a.nbytes for a in arrays if a is not None)


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def loader_run(store, order: str, args) -> dict:
    """First batch of epoch 0, then the steady time per batch, the cost of state_dict, and
    the first batch of a loader resumed mid-epoch from that state."""
    from feedline import FeedLoader
    options = dict(batch_size=args.batch_size, shuffle=True, train=True, order=order, size=args.size,
                   num_workers=args.threads, seed=0)
    with FeedLoader(store, **options) as loader:
        t0 = time.perf_counter()
        batches = iter(loader)
        next(batches)
        first = time.perf_counter() - t0
        rss_epoch = rss_anon()
        gaps, last = [], time.perf_counter()
        for _ in range(min(args.batches, len(loader) - 2)):  # the last batch may be short
            next(batches)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
        state = loader.state_dict()
        state_s = median_s(loader.state_dict, 1000)
        batches.close()
    with FeedLoader(store, **options) as resumed:
        resumed.load_state_dict(state)
        t0 = time.perf_counter()
        it = iter(resumed)
        next(it)
        resume_first = time.perf_counter() - t0
        it.close()
    return {"first_batch_s": first, "batch_ms": 1e3 * statistics.median(gaps), "batch_ms_max": 1e3 * max(gaps),
            "state_dict_us": 1e6 * state_s, "resume_first_batch_s": resume_first, "rss_anon_epoch": rss_epoch}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/scale_probe.py")
    p.add_argument("store")
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)

    import torch  # noqa: F401  (imported before any measurement)
    from feedline import FeedLoader  # noqa: F401
    from feedline.planning.augment import AugmentSpec
    from feedline.core.choices import Order
    from feedline.planning.plan import EpochPlan
    from feedline.stores import open_dataset

    path = args.store
    with open_dataset(path) as store:
        files = store.files()
    del store
    gc.collect()
    drop_from_page_cache(files)
    rss0 = rss_anon()
    t0 = time.perf_counter()
    store = open_dataset(path)
    open_cold = time.perf_counter() - t0
    rss1 = rss_anon()
    n = len(store)
    result = {"records": n, "open_cold_s": open_cold, "rss_anon_open": rss1 - rss0, "held_bytes": held_bytes(store)}
    store.close()
    t0 = time.perf_counter()
    store = open_dataset(path)
    result["open_warm_s"] = time.perf_counter() - t0

    # The loader runs on a warm page cache: its time per batch is to show Python's work per
    # batch, not the disk's (bench/cold_cache.py measures reading a cold store).
    for name in files:
        with open(name, "rb") as fh:
            while fh.read(16 << 20):
                pass
    spec = AugmentSpec(size=args.size, train=True)
    for order in (Order.RANDOM, Order.QUASI_RANDOM):
        plan = EpochPlan(spec, 0, 1, order, args.batch_size, False)
        result[f"permutation_{order.name.lower()}_s"] = median_s(lambda: plan.samples(n), 5)
    plans = EpochPlan(spec, 0, 1, Order.RANDOM, args.batch_size, False).batches(store.labels, store.sizes)
    next(plans)   # the permutation
    result["plan_batch_us"] = 1e6 * median_s(lambda: next(plans), min(args.batches, n // args.batch_size - 2))
    for order in ("random", "quasi-random"):
        run = loader_run(store, order, args)
        run["rss_anon_epoch"] -= rss0
        result[order.replace("-", "_")] = run
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
