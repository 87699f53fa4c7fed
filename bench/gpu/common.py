"""What the GPU benchmarks share: options every script takes, timing a stream of batches
on the GPU, interleaved repeats, and the profile that says where a loader's time goes.

Every script runs on the GPU machine from .ci/gpu/check.sh and, with ``--cpu-smoke``, on
the CPU in seconds (tiny sizes), so the tests here catch import errors and bad arguments.
Without CUDA and without ``--cpu-smoke`` a script does what it can without the device
(imports, its data opened) and exits with NO_CUDA, which the check reports as "skipped: no
CUDA device" (`make gpu-rehearsal`). Every wait on a child process has a timeout.
"""
from __future__ import annotations

import argparse
import functools
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

SMOKE = {"batch_size": 8, "batches": 2, "drain": 1, "repeats": 1, "warmup": 1, "threads": 2}
NO_CUDA = 3           # exit code: this needs a CUDA device and there is none (the check: "skipped")
KILL_WAIT_S = 10.0    # after SIGKILL, how long a child's end is waited for (stuck in the driver: never)


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


def device_for(args: argparse.Namespace, data: str | None = None, folder: str | None = None,
               imports: tuple[str, ...] = ()) -> str:
    """'cuda' on the GPU machine; 'cpu' with --cpu-smoke. Before it looks: ``data`` (a packed
    store) and ``folder`` opened and, but with --cpu-smoke, the modules in ``imports``
    imported (what the GPU run needs), so a run without CUDA still proves those. Without
    CUDA and without --cpu-smoke it exits with NO_CUDA, saying so."""
    import importlib
    import torch
    for module in () if args.cpu_smoke else imports:
        importlib.import_module(module)
    if data is not None:
        from feedline.stores import open_dataset
        with open_dataset(data) as store:
            if len(store) == 0:
                raise SystemExit(f"{data}: the data set is empty")
    if folder is not None and not os.path.isdir(folder):
        raise SystemExit(f"{folder}: no such folder (bench/gpu/photos.py makes it)")
    if args.cpu_smoke:
        return "cpu"
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark measures the GPU path (use --cpu-smoke to try it here); "
              "everything before the device was checked", flush=True)
        raise SystemExit(NO_CUDA)
    return "cuda"


@functools.cache
def region_decode() -> bool | None:
    """FeedLoader's ``region_decode`` as the GPU check set it (FEEDLINE_GPU_REGION_DECODE: 0
    after its smoke test saw a region decode crash); None where unset: the library's rule."""
    from feedline.sources.gpu_region import region_decode_choice
    return region_decode_choice(os.environ.get("FEEDLINE_GPU_REGION_DECODE"))


def machine() -> dict:
    from bench.machine import machine_info
    return machine_info()


def write(name: str, rows: list[dict], params: dict, out: str, **extra) -> Path:
    """The benchmark's JSON, rewritten whole (atomically) each time something was measured."""
    from bench.common import write_results
    return write_results(name, rows, params, out, machine=machine(), **extra)


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


def timed_repeats(samples: list[float], name: str, stream: Iterator, args: argparse.Namespace, device: str,
                  report: Callable[[list[float]], object], say=print) -> None:
    """``--repeats`` timed runs of ``--batches`` (the first after ``--drain`` untimed ones), each
    appended to ``samples``, said and reported as it ends: a stage cut short keeps the repeats
    it finished."""
    for r in range(args.repeats):
        samples.append(measure(stream, args.batches, args.drain if r == 0 else 0, device, args.batch_size))
        say(f"  {name}: repeat {r + 1}/{args.repeats}: {samples[-1]:,.0f} img/s")
        report(samples)


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
    its JSON (torchrun's and the trainer's children go with it). A child that outlives
    SIGKILL (stuck in the driver) is left behind after KILL_WAIT_S, exit code 137."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        try:
            out, err = proc.communicate(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(cmd, 137, "", f"stopped after {timeout:.0f} s; still alive after "
                                               f"SIGKILL (stuck in the kernel?): left behind")
        return subprocess.CompletedProcess(cmd, 124, out, (err or "") + f"\nstopped after {timeout:.0f} s")
    finally:
        kill_group(proc.pid)   # whatever of its group outlived it


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_polling(cmd: list[str], timeout: float, every_s: float, on_poll: Callable[[], object]
                ) -> subprocess.CompletedProcess:
    """``cmd`` as ``run_for`` runs it (its output, stdout and stderr together, in
    ``.stdout``), calling ``on_poll()`` every ``every_s`` seconds while it runs: the caller
    writes what the child has measured so far."""
    import tempfile
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline, code = time.monotonic() + timeout, None
        try:
            while code is None:
                try:
                    code = proc.wait(timeout=max(0.01, min(every_s, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        kill_group(proc.pid)
                        try:
                            proc.wait(timeout=KILL_WAIT_S)
                            code = 124
                        except subprocess.TimeoutExpired:
                            code = 137   # stuck in the kernel after SIGKILL: left behind
                        break
                    on_poll()
        finally:
            kill_group(proc.pid)
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
    if code in (124, 137):
        text += f"\nstopped after {timeout:.0f} s" + ("; still alive after SIGKILL: left behind" if code == 137 else "")
    return subprocess.CompletedProcess(cmd, code, text, "")
