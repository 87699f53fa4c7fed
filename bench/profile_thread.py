"""Where an image's time goes, outside the decode too (issue 24 item 5), on a grid store and
an original store of the same photos, one run.

    .venv/bin/python bench/profile_thread.py [--n 300] [--batches 12] [--quick] [--save]

Decode thread, per image, one thread, the calls the decode threads make in the order they
make them (RandomResizedCrop 224 + flip, batch 64): the store read and its checksum, the
grid parse and splice, the JPEG decode with its resize + flip (on a grid store the
calls GridDecoder makes, timed one by one), the normalization into a float32
row (uint8 output decodes into the row itself: no such step), and the queue's own cost
per sample (chunks, the worker loop, answers), measured on one worker thread whose store and
decoder do nothing. Consumer thread, per batch: FeedLoader iterated under cProfile (only
that thread is profiled), the time not spent waiting for the decode threads, for float32
and uint8 outputs, with its largest items. JSON: bench/results/profile_thread.json.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root first on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import format_table, say, write_results  # noqa: E402

SIZE, BATCH = (224, 224), 64
_WAITS = ("wait", "acquire", "_wait_for_tstate_lock", "poll")   # the consumer blocked on its workers


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def stages(store, n: int, grid: bool) -> dict:
    """Milliseconds per image of each step a decode thread takes, summed over ``n`` images."""
    import numpy as np
    import torch

    from feedline.planning.augment import random_resized_crop, uniforms
    from feedline.core.config import OutputSpec
    from feedline.decoders import get_decoder
    from feedline.decoders.base import Box
    from feedline.decoders.grid_decoder import grid_decoder_for
    from feedline.decoders.jpeg_grid import parse_grid, splice_crop
    from feedline.sources.arena import Arena
    from feedline.sources.ring import row_format
    from feedline.sources.rows import RowWriter
    count = min(n, len(store))
    sizes = np.asarray(store.sizes[:count])
    boxes = random_resized_crop(sizes[:, 0], sizes[:, 1], uniforms(7, 0, range(count), 22))
    decoder = get_decoder("auto")
    grid_decoder = grid_decoder_for(store, decoder)
    out = np.empty((*SIZE, 3), np.uint8)
    fmt = row_format(OutputSpec(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), dtype=torch.float32,
                                channels_last=True, device="cpu"), 1, SIZE)
    rows = RowWriter(fmt, Arena(fmt.nbytes, shared=False).memory)   # a worker's row of a host batch
    spent = dict.fromkeys(["read", "checksum", "parse", "splice", "jpeg_decode", "normalize_f32"], 0.0)
    for i in range(count):
        box, flip = Box(*map(int, boxes[i])), bool(i % 2)
        t0 = time.perf_counter()
        data = store.read(i)
        t1 = time.perf_counter()
        store.read_checked(i)
        t2 = time.perf_counter()
        spent["read"] += t1 - t0
        spent["checksum"] += max(t2 - t1 - (t1 - t0), 0.0)   # read_checked = read + checksum
        if grid:   # GridDecoder.decode_into's two calls, each timed
            t0 = time.perf_counter()
            layout = parse_grid(data)
            t1 = time.perf_counter()
            spliced, shifted, _ = splice_crop(data, box, layout)
            t2 = time.perf_counter()
            grid_decoder.crops.decode_into(spliced, shifted, flip, out)   # decode + resize + flip
            spent["parse"] += t1 - t0
            spent["splice"] += t2 - t1
            spent["jpeg_decode"] += time.perf_counter() - t2
        else:
            spent["jpeg_decode"] += timed(decoder.decode_into, data, box, flip, out)   # decode + crop + resize
        spent["normalize_f32"] += timed(rows.write, 0, out)
    return {k: 1e3 * v / count for k, v in spent.items()}


class _NoStore:
    def __init__(self, n: int):
        self.data = b"x"

    def read_checked(self, index: int):
        return self.data


class _NoDecoder:
    name = "none"

    def decode_into(self, data, box, flip, out) -> None:
        pass


def queue_overhead(n_batches: int) -> float:
    """Milliseconds per sample of the engine's own machinery (chunks sent to a worker thread,
    its loop and fill bookkeeping, the answers heard back), with a store and a decoder that
    do nothing: the one sample path minus its read, decode and write."""
    import numpy as np

    from feedline.planning.augment import AugmentSpec
    from feedline.core.choices import OnError, Order
    from feedline.core.config import OutputSpec
    from feedline.planning.plan import BatchPlan, EpochPlan
    from feedline.sources.dispatch import ChunkQueue
    from feedline.sources.fill import SampleSpec
    from feedline.sources.policy import BadRecordPolicy
    from feedline.sources.ring import ArenaRing, RingSpec
    from feedline.sources.thread_workers import ThreadWorkers
    from feedline.core.stats import LoaderStats

    epoch = EpochPlan(AugmentSpec(size=SIZE), 0, 0, Order.SEQUENTIAL, BATCH, False)
    output = OutputSpec(mean=None, std=None, channels_last=True, device="cpu")   # rows are the decoded pixels
    workers = ThreadWorkers(SampleSpec(_NoStore(BATCH), _NoDecoder(), None, 0, False), 1)
    memory = ArenaRing(RingSpec(n_batches, BATCH, output, False), SIZE, workers, None)
    stats = LoaderStats()
    workers.start()
    try:
        queue = ChunkQueue(workers, epoch, BadRecordPolicy(None, OnError.RAISE, epoch, stats.ledger), stats, None)
        plans = [BatchPlan(0, number, np.arange(BATCH), np.tile([0, 0, 224, 224], (BATCH, 1)),
                           np.zeros(BATCH, bool), np.zeros(BATCH, np.int64)) for number in range(n_batches)]
        slots = [memory.ring.slot(number) for number in range(n_batches)]
        t0 = time.perf_counter()
        for slot, plan in zip(slots, plans):
            slot.load(plan)
            queue.submit(slot)
        while queue.next_filled() is not None:
            pass
        return 1e3 * (time.perf_counter() - t0) / (n_batches * BATCH)
    finally:
        workers.close()


def consumer(path: str, dtype, batches: int, grid: bool) -> dict:
    """The consumer thread's own time per batch (not waiting), and its largest items."""
    import torch

    from feedline import FeedLoader
    loader = FeedLoader(path, batch_size=BATCH, shuffle=True, train=True, size=SIZE[0], device="cpu", dtype=dtype,
                        drop_last=True, **({"mean": None, "std": None} if dtype == torch.uint8 else {}))
    for _ in range(2):   # two whole epochs unprofiled; the second's accounting (the first touches the ring)
        for _ in loader:
            pass
    done = loader.stats
    threads = loader.config.num_workers
    accounted = (done.read_s + done.decode_s + done.copy_s) / done.images
    accounting = {"threads": threads, "img_s": done.images / done.elapsed_s,
                  "read_ms": 1e3 * done.read_s / done.images, "decode_ms": 1e3 * done.decode_s / done.images,
                  "normalize_ms": 1e3 * done.copy_s / done.images,
                  "outside_ms": 1e3 * (threads * done.elapsed_s / done.images - accounted)}
    from bench.grid import endless
    stream = endless(loader)
    for _ in range(2):
        next(stream)
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    for _ in range(batches):
        next(stream)
    profile.disable()
    elapsed = time.perf_counter() - t0
    loader.close()
    stats = pstats.Stats(profile).stats
    waited = sum(tt for (_, _, name), (_, _, tt, _, _) in stats.items() if any(w in name for w in _WAITS))
    own = sorted(((tt, f"{Path(f).name}:{name}") for (f, _, name), (_, _, tt, _, _) in stats.items()
                  if not any(w in name for w in _WAITS)), reverse=True)
    total = sum(v[2] for v in stats.values())
    return {**accounting, "elapsed_ms_per_batch": 1e3 * elapsed / batches, "waiting_ms_per_batch": 1e3 * waited / batches,
            "own_ms_per_batch": 1e3 * (total - waited) / batches,
            "top": [{"where": w, "ms_per_batch": 1e3 * t / batches} for t, w in own[:6]]}


def main(argv: list[str] | None = None) -> int:
    import torch

    from feedline import open_dataset
    from bench.args import check_output_flags, output_arguments
    p = argparse.ArgumentParser(prog="bench/profile_thread.py", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=300, help="photo-like JPEGs generated (default 300)")
    p.add_argument("--batches", type=int, default=12, help="batches profiled on the consumer (default 12)")
    p.add_argument("--quick", action="store_true", help="a tiny run, to check the script works")
    output_arguments(p, "profile_thread")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    n, batches = (64, 2) if args.quick else (args.n, args.batches)
    from bench.grid import pack_cli
    from feedline.sample import make_photo_folder
    work = Path(tempfile.mkdtemp(prefix="feedline-profile-"))
    make_photo_folder(str(work / "images"), n=n, classes=4, seed=0)
    rows, consumers = [], []
    for layout in ("original", "grid"):
        path = work / f"{layout}.lmdb"
        pack_cli(str(work / "images"), path, layout)
        with open_dataset(str(path)) as store:
            stages(store, min(n, 32), layout == "grid")          # warm-up
            row = {"layout": layout, **stages(store, n, layout == "grid")}
        row["queue"] = queue_overhead(max(n // BATCH, 2))
        row["total_f32"] = sum(v for k, v in row.items() if k != "layout")
        row["total_u8"] = row["total_f32"] - row["normalize_f32"]
        rows.append(row)
        for dtype in (torch.float32, torch.uint8):
            consumers.append({"layout": layout, "dtype": str(dtype).removeprefix("torch."),
                              **consumer(str(path), dtype, batches, layout == "grid")})
    cols = [(k, k) for k in rows[0]]
    say(f"decode thread, ms per image ({n} photos, RandomResizedCrop 224 + flip, one thread):")
    say(format_table(rows, cols))
    say(f"consumer thread, ms per batch of {BATCH}:")
    say("loader, one epoch, ms per image summed over its decode threads (outside: the threads' time in none "
        "of read, decode, normalize: queue, locks, waiting for a free slot or the GIL):")
    say(format_table(consumers, [("layout", "layout"), ("dtype", "dtype"), ("threads", "threads"),
                                 ("img/s", "img_s"), ("read", "read_ms"), ("decode", "decode_ms"),
                                 ("normalize", "normalize_ms"), ("outside", "outside_ms")]))
    say(format_table(consumers, [("layout", "layout"), ("dtype", "dtype"), ("next() ms", "elapsed_ms_per_batch"),
                                 ("waiting ms", "waiting_ms_per_batch"), ("own ms", "own_ms_per_batch")]))
    for c in consumers:
        say(f"  {c['layout']}/{c['dtype']}: " + ", ".join(f"{t['where']} {t['ms_per_batch']:.2f}" for t in c["top"]))
    path = write_results("profile_thread", rows, params={"n": n, "batches": batches, "batch_size": BATCH,
                                                         "size": SIZE[0]}, out=args.out, quick=args.quick,
                         save=args.save, consumer=consumers)
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
