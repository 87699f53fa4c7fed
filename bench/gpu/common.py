"""What the GPU benchmarks share: options every script takes, timing a stream of batches
on the GPU, interleaved repeats, and the profile that says where a loader's time goes.

Every script runs on the GPU machine from .ci/gpu/check.sh and, with ``--cpu-smoke``, on
the CPU in seconds (tiny sizes), so the tests here catch import errors and bad arguments.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import time
from typing import Callable, Iterator

SMOKE = {"batch_size": 8, "batches": 2, "drain": 1, "repeats": 1, "warmup": 1, "threads": 2}


def add_common(p: argparse.ArgumentParser) -> None:
    """--data/--folder (the photos), --out, --cpu-smoke, --threads, --repeats."""
    p.add_argument("--data", required=True, help="packed .lmdb of the photos (bench/gpu/photos.py)")
    p.add_argument("--folder", help="the same photos as an image folder (for the torchvision rows)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--threads", type=int, default=16, help="decode threads / DataLoader workers (default 16)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats, interleaved across rows (default 3)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="a tiny run on the CPU that only proves the script works (no figure means anything)")


def positive(p: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")


def apply_smoke(args: argparse.Namespace) -> None:
    """--cpu-smoke: the tiny sizes wherever the script has such an option."""
    if args.cpu_smoke:
        for name, value in SMOKE.items():
            if hasattr(args, name):
                setattr(args, name, value)


def device_for(args: argparse.Namespace) -> str:
    """'cuda' on the GPU machine; 'cpu' with --cpu-smoke. Without CUDA and without
    --cpu-smoke the script cannot measure anything: it says so."""
    import torch
    if args.cpu_smoke:
        return "cpu"
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark measures the GPU path (use --cpu-smoke to try it here)")
    return "cuda"


def cpu_decoder() -> str:
    """The per-image decoder FeedLoader's threads use by default. Not "auto": on a CUDA
    device "auto" means DALI whenever DALI is installed."""
    from feedline.decoders import get_decoder
    return get_decoder("auto").name


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize()


def measure(batches: Iterator, count: int, drain: int, device: str, images_per_batch: int) -> float:
    """Images/s over ``count`` batches, after ``drain`` untimed ones (what the loader had
    buffered while the other loaders were measured)."""
    for _ in range(drain):
        next(batches)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(count):
        next(batches)
    sync(device)
    return count * images_per_batch / (time.perf_counter() - t0)


def interleaved(names: list[str], repeats: int, run: Callable[[str], float], failed: dict[str, str],
                say=print) -> dict[str, list[float]]:
    """Repeats in a rotating order, so that load hitting one round hits every row. A row
    that raises (a DataLoader worker killed, say) is dropped, its error put in ``failed``."""
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name in failed:
                continue
            try:
                samples[name].append(run(name))
            except Exception as exc:
                failed[name] = f"failed while measured: {type(exc).__name__}: {exc}"
                samples[name] = []
        say(f"  repeat {r + 1}/{repeats}: " + ", ".join(
            f"{n} {samples[n][-1]:,.0f}/s" if samples[n] else f"{n} failed" for n in names))
    return samples


def median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def profiled_run(loader, count: int, drain: int, device: str, threads: int) -> dict:
    """A FeedLoader's profile over ``count`` batches of a fresh epoch, after ``drain``: the
    difference of its stage counters across the timed interval, so idle time before it
    (while other rows were measured) does not dilute it."""
    keys = ("images", "batches", "wait_s", "read_s", "decode_s", "copy_s")
    batches = iter(loader)
    try:
        for _ in range(drain):
            next(batches)
        sync(device)
        before, t0 = loader.stats.as_dict(), time.perf_counter()
        for _ in range(count):
            next(batches)
        sync(device)
        after, seconds = loader.stats.as_dict(), time.perf_counter() - t0
    finally:
        batches.close()
    diff = {k: after[k] - before[k] for k in keys} | {"elapsed_s": seconds}
    return loader_profile(diff, threads) | {"images_per_s": diff["images"] / seconds, "batches": count}


def loader_profile(stats: dict, threads: int) -> dict:
    """Where a FeedLoader's time went, from ``loader.stats.as_dict()``: how busy the decode
    threads were, how long the consumer waited, what enqueueing the copy cost."""
    elapsed = max(stats.get("elapsed_s") or 0.0, 1e-9)
    images = max(stats.get("images") or 0, 1)
    batches = max(stats.get("batches") or 0, 1)
    busy = (stats.get("read_s", 0.0) + stats.get("decode_s", 0.0)) / (elapsed * threads)
    per_image_ms = 1e3 * (stats.get("read_s", 0.0) + stats.get("decode_s", 0.0)) / images
    return {"decode_threads_busy": busy, "consumer_wait_fraction": stats.get("wait_s", 0.0) / elapsed,
            "read_ms_per_image": 1e3 * stats.get("read_s", 0.0) / images,
            "decode_ms_per_image": 1e3 * stats.get("decode_s", 0.0) / images,
            "copy_enqueue_ms_per_batch": 1e3 * stats.get("copy_s", 0.0) / batches,
            "thread_ceiling_images_per_s": threads * 1e3 / per_image_ms if per_image_ms > 0 else None}


def diagnose(profile: dict, threads: int) -> str:
    """One sentence on what limits the loader, from ``loader_profile``."""
    busy, wait = profile["decode_threads_busy"], profile["consumer_wait_fraction"]
    ceiling = profile.get("thread_ceiling_images_per_s")
    if busy >= 0.85:
        return (f"decode-bound: the {threads} decode threads were {busy:.0%} busy at "
                f"{profile['read_ms_per_image'] + profile['decode_ms_per_image']:.2f} ms per image "
                f"(read + decode, thread time), a ceiling of {ceiling:,.0f} img/s at this thread count")
    if wait >= 0.5:
        return (f"not decode-bound (threads {busy:.0%} busy) yet the consumer waited {wait:.0%} of the time: "
                "the hand-over (queue, copy, finisher) is the bottleneck")
    return (f"consumer-bound: the consumer waited only {wait:.0%} of the time and the threads were {busy:.0%} "
            "busy, so the loop around the loader set the pace")


def gpu_name() -> str | None:
    import torch
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def run_for(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``cmd`` for at most ``timeout`` seconds, its whole process group killed then; a run
    stopped so returns exit code 124 and the output it had, so the benchmark still writes
    its JSON (torchrun's and the trainer's children go with it)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(cmd, 124, out, (err or "") + f"\nstopped after {timeout:.0f} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # whatever of its group outlived it
        except (ProcessLookupError, PermissionError):
            pass
