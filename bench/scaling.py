"""How far can each engine scale with the cores? The GIL each process holds per image.

    python bench/scaling.py [--quick] [--seconds S] [--workers N] [--engines threads,processes]
                            [--modes recipe] [--layouts original] [--out PATH | --save]
    python bench/scaling.py --store photos.lmdb --modes cuda --engines processes --workers 16 --out gil.json

A Python thread that holds the GIL stops every other thread of its process: a process that
holds it g seconds per image can never pass 1/g images/s, whatever the cores. For every
engine, output mode (float32, uint8, a CPU recipe, a user's numpy hook) and store layout
(original, grid), this runs a FeedLoader in a process of its own (the consumer: the
training process), samples every thread of it and of its workers with py-spy (``--gil``
then ``--idle``, as ../shared/tools/gil_ceiling.py does) and reports, per process:

    gil_share         the fraction of wall time some thread of the process held the GIL
    gil_ms_per_image  that share / the images/s delivered (a worker: per image of its own
                      share too, ``gil_ms_per_own_image``)
    ceiling_img_s     1 / gil_ms_per_image: what that process allows, at any number of cores
    rss_mib, pss_mib  its memory; ``pss_own_mib`` leaves out the shared batch ring

The consumer serves every image, so its ceiling bounds the loader; a worker serves its
share, so worker ceilings multiply with the workers. Engines are compared side by side in
one run. On a loaded machine a thread that holds the GIL while waiting for a core inflates
the figures (the tool saw 0.10 ms/img become 0.36 with two other jobs running): read the
machine's load beside them, and compare engines within one run only. Needs py-spy
(pip install py-spy) and ptrace rights. Writes bench/results/local/scaling.json
(bench/results/ with --save, bench/results/quick/ with --quick), after every row.

Mode ``cuda`` is the GPU check's loader work (bench/gpu/loader_img_s.py): batch 256,
RandomResizedCrop 224, bf16 channels_last on a CUDA device, so the consumer's figure
includes the CUDA Finisher. ``--store`` probes a packed store of your own (its layout is
reported as "given") instead of generating photos.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root first on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, format_table, say, write_results  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402

NAME = "scaling"
MODES = ("float", "uint8", "recipe", "callable", "cuda")
LAYOUTS = ("original", "grid")
CONSUMER_TARGET_MS = 0.02   # the consumer's GIL per image: a ceiling of 50,000 img/s

RUNNER = textwrap.dedent('''
    import json, sys, time
    import numpy as np
    from feedline import FeedLoader, TransformSpec
    import select
    path, mode, engine, workers, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    kw = dict(batch_size=64, shuffle=True, train=True, size=224, device="cpu", num_workers=workers,
              drop_last=True, seed=0, engine=engine)
    if mode == "uint8":
        kw["mean"] = None
    if mode == "recipe":
        from feedline.transforms import Mixup, RandAugment, RandomErasing
        kw["transforms"] = TransformSpec(transforms=[RandAugment(2, 9), RandomErasing(0.25)],
                                         batch_transforms=[Mixup(mixup_alpha=0.8, cutmix_alpha=1.0,
                                                                 label_smoothing=0.1)])
    if mode == "cuda":   # the GPU check's loader work: loader_img_s.py
        import torch
        from feedline import OutputSpec
        from feedline.decoders import get_decoder
        kw.update(batch_size=256, device="cuda", output=OutputSpec(dtype=torch.bfloat16, channels_last=True),
                  decoder=get_decoder("auto").name)
    if mode == "callable":
        def jitter(image, rng):   # a typical user hook: numpy on the uint8 crop
            return np.clip(image.astype(np.int16) + rng.integers(-8, 9, size=(1, 1, 3)), 0, 255).astype(np.uint8)
        kw["transforms"] = [jitter]
    loader = FeedLoader(path, **kw)
    it = iter(loader); next(it); next(it)
    print("READY", flush=True)
    n, epoch, t0, marks = 0, 0, time.perf_counter(), []
    while time.perf_counter() - t0 < secs and not select.select([sys.stdin], [], [], 0)[0]:   # a line: stop
        try:
            x, y = next(it)
            n += x.shape[0]
            marks.append((time.perf_counter(), n))
        except StopIteration:
            epoch += 1
            loader.set_epoch(epoch)
            it = iter(loader)
    print("MARKS " + json.dumps(marks), flush=True)
    loader.close()
''')


# The native candidate: nvImageCodec's batched CPU decode of a batch's crop regions, in one
# call on its own C++ threads (``workers`` of them), in the training process; then each crop
# resized and flipped into the batch. No FeedLoader: its per-image Python is what is measured.
NATIVE = "nvimgcodec-batch"
NATIVE_RUNNER = textwrap.dedent('''
    import json, select, sys, time
    import numpy as np
    from feedline import open_dataset
    from feedline.planning.augment import AugmentSpec
    from feedline.core.choices import Order
    from feedline.decoders.base import resize_into
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    from feedline.planning.plan import EpochPlan
    nv = load_nvimgcodec()
    path, mode, engine, workers, secs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    store = open_dataset(path)
    decoder = nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=workers,
                         backends=[nv.Backend(nv.CPU_ONLY)])
    params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.SRGB)
    batch = np.empty((64, 224, 224, 3), dtype=np.uint8)
    def epoch_plans(epoch):
        plan = EpochPlan(AugmentSpec(size=(224, 224)), 0, epoch, Order.RANDOM, 64, True)
        return plan.batches(store.labels, store.sizes)
    def make(plan):
        streams = []
        for index, (top, left, h, w) in zip(plan.indices.tolist(), plan.boxes.tolist()):
            stream = nv.CodeStream(store.read_checked(index))
            streams.append(stream.get_sub_code_stream(region=nv.Region(start=(top, left), end=(top + h, left + w))))
        for j, (image, flip) in enumerate(zip(decoder.decode(streams, params=params), plan.flips.tolist())):
            resize_into(np.asarray(image), batch[j], flip)
        return batch
    epoch = 0
    plans = epoch_plans(epoch)
    def next_batch():
        global plans, epoch
        for plan in plans:
            return make(plan)
        epoch += 1
        plans = epoch_plans(epoch)
        return next_batch()
    next_batch(); next_batch()
    print("READY", flush=True)
    n, t0, marks = 0, time.perf_counter(), []
    while time.perf_counter() - t0 < secs and not select.select([sys.stdin], [], [], 0)[0]:
        n += len(next_batch())
        marks.append((time.perf_counter(), n))
    print("MARKS " + json.dumps(marks), flush=True)
''')


def child_env() -> dict:
    """This environment with the repository first on PYTHONPATH, the rest kept (the GPU
    check's carried wheels are found through it)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


def make_stores(folder: Path, n: int, layouts=LAYOUTS) -> dict[str, Path]:
    """`feedline sample` photos packed once per layout (--layout original, --layout grid)."""
    env = child_env()
    cli = [sys.executable, "-m", "feedline"]
    subprocess.run([*cli, "sample", "-n", str(n), str(folder / "photos")], check=True, env=env,
                   capture_output=True)
    stores = {}
    for layout in layouts:
        stores[layout] = folder / f"{layout}.lmdb"
        subprocess.run([*cli, "pack", str(folder / "photos"), str(stores[layout]), "--layout", layout, "--quiet"],
                       check=True, env=env, capture_output=True)
    return stores


def parse_raw(path: Path) -> tuple[collections.Counter, collections.Counter]:
    """py-spy raw lines 'process ...;[process ...;]thread ...;frames count' -> samples per process,
    per (process, thread). (gil_ceiling.py's parse reads the first process frame, which charges
    a worker's samples to the consumer.)"""
    per_proc, per_thread = collections.Counter(), collections.Counter()
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        # with --subprocesses a child's stack starts with its parents' process frames: the last one is its own
        proc = next((f for f in reversed(frames) if f.startswith("process ")), "process")
        thread = next((f for f in frames if f.startswith("thread")), "thread")
        per_proc[proc] += int(count)
        per_thread[(proc, thread)] += int(count)
    return per_proc, per_thread


def consumer_frames(path: Path, pid: int, n: int = 6) -> list[list]:
    """Where the consumer's GIL samples fall: [share, innermost feedline frame <- leaf frame]."""
    where, total = collections.Counter(), 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        procs = [f for f in frames if f.startswith("process ")]
        if procs and pid_of(procs[-1]) != pid:
            continue
        inner = [f for f in frames if "feedline/" in f]
        where[(inner[-1] if inner else "-") + "  <- " + frames[-1]] += int(count)
        total += int(count)
    return [[round(k / total, 3), key[:160]] for key, k in where.most_common(n)] if total else []


def pid_of(proc: str) -> int | None:
    head = proc.split(":")[0].replace("process", "").strip()
    return int(head) if head.isdigit() else None


def memory_mib(pid: int) -> dict:
    """RSS, PSS and the PSS beyond shared memory (the ring) of ``pid``, from smaps_rollup."""
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0]) / 1024
    except (OSError, ValueError):
        return {}
    return {"rss_mib": round(fields.get("Rss", 0), 1), "pss_mib": round(fields.get("Pss", 0), 1),
            "pss_own_mib": round(fields.get("Pss", 0) - fields.get("Pss_Shmem", 0), 1)}


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def probe(store: Path, mode: str, engine: str, workers: int, seconds: float, rate: int, spy: str) -> dict:
    """One FeedLoader configuration sampled: images/s and per-process GIL and memory."""
    work = Path(tempfile.mkdtemp(prefix="scaling-"))
    try:
        runner = work / "runner.py"
        runner.write_text(NATIVE_RUNNER if engine == NATIVE else RUNNER)
        total = seconds * 2 + 20
        env = child_env()
        p = subprocess.Popen([sys.executable, str(runner), str(store), mode, engine, str(workers), str(total)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
        line = p.stdout.readline()
        if "READY" not in line:
            p.kill()
            raise RuntimeError(f"{engine}/{mode}: the loader did not start: {(line + p.stderr.read())[-800:]}")
        time.sleep(1.0)
        memory = {pid: memory_mib(pid) for pid in [p.pid, *descendants(p.pid)]}
        common = [spy, "record", "--pid", str(p.pid), "--duration", str(int(seconds)), "--rate", str(rate),
                  "--threads", "--subprocesses", "--nonblocking", "--format", "raw"]
        t0 = time.perf_counter()
        r1 = subprocess.run([*common, "--gil", "-o", str(work / "gil.raw")], capture_output=True, text=True)
        t1 = time.perf_counter()
        r2 = subprocess.run([*common, "--idle", "-o", str(work / "all.raw")], capture_output=True, text=True)
        out, err = p.communicate("stop\n", timeout=total + 60)
        if r1.returncode or r2.returncode:
            raise RuntimeError("py-spy failed (it needs ptrace rights): " + (r1.stderr + r2.stderr)[-600:])
        marks = json.loads(next(m for m in out.splitlines() if m.startswith("MARKS "))[6:])
        inside = [(t, n) for t, n in marks if t0 <= t <= t1]
        if len(inside) < 2:
            raise RuntimeError(f"{engine}/{mode}: too few batches inside the sampling window: raise --seconds")
        img_s = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
        gil, _ = parse_raw(work / "gil.raw")
        frames = consumer_frames(work / "gil.raw", p.pid)
        _, threads = parse_raw(work / "all.raw")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ticks = collections.Counter()
    for (proc, _t), n in threads.items():   # one sample per tick per thread: a process's ticks are its busiest's
        ticks[proc] = max(ticks[proc], n)
    processes = []
    workers_seen = sum(1 for proc in ticks if pid_of(proc) not in (p.pid, None))
    for proc in sorted(ticks, key=lambda k: -gil.get(k, 0)):
        pid = pid_of(proc)
        consumer = pid in (p.pid, None)
        share = gil.get(proc, 0) / ticks[proc] if ticks[proc] else 0.0
        ms = share / img_s * 1e3
        row = {"process": "consumer" if consumer else f"worker pid {pid}", "consumer": consumer,
               "gil_share": round(share, 4), "gil_ms_per_image": round(ms, 4),
               "ceiling_img_s": round(1e3 / ms) if ms > 0 else None, **memory.get(pid, {})}
        if not consumer and workers_seen:
            row["gil_ms_per_own_image"] = round(ms * workers_seen, 4)   # workers share the images evenly
        processes.append(row)
    consumer = next((r for r in processes if r["consumer"]), {})
    worker_rows = [r for r in processes if not r["consumer"]]
    return {"store": store.stem, "mode": mode, "engine": engine, "workers": workers, "img_s": round(img_s, 1),
            "consumer_gil_ms_per_image": consumer.get("gil_ms_per_image"),
            "consumer_ceiling_img_s": consumer.get("ceiling_img_s"),
            "worker_gil_ms_per_own_image": max((r["gil_ms_per_own_image"] for r in worker_rows), default=None),
            "consumer_target_met": (consumer.get("gil_ms_per_image") or 0) <= CONSUMER_TARGET_MS,
            "consumer_gil_where": frames,
            "processes": processes}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run (float and callable modes): not judged")
    p.add_argument("--seconds", type=float, default=None, help="sampling window per configuration (default 10)")
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--workers", type=int, default=2, help="num_workers of every loader (threads or processes)")
    p.add_argument("--engines", default="threads,processes", help="engines to compare, comma-separated "
                   f"(and {NATIVE!r}: nvImageCodec's batched decode alone, in float mode only)")
    p.add_argument("--modes", default=None, help=f"comma-separated, of {','.join(MODES)} (default: all but cuda)")
    p.add_argument("--store", type=Path, help="probe this packed store (layout 'given') instead of generated photos")
    p.add_argument("--out", type=Path, help="write the JSON here")
    p.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma-separated, of {','.join(LAYOUTS)}")
    p.add_argument("--n", type=int, default=None, help="photos generated (default 2000, 300 quick)")
    p.add_argument("--save", action="store_true", help="write bench/results/scaling.json")
    a = p.parse_args(argv)
    layouts = a.layouts.split(",")
    if not set(layouts) <= set(LAYOUTS):
        p.error(f"--layouts: of {','.join(LAYOUTS)}, got {a.layouts!r}")
    spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if spy is None:
        p.error("py-spy is not installed: pip install py-spy")
    seconds = a.seconds or (3.0 if a.quick else 10.0)
    modes = a.modes.split(",") if a.modes else (["float", "callable"] if a.quick else list(MODES[:-1]))
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"unknown mode {unknown[0]!r}; use {', '.join(MODES)}")
    engines = a.engines.split(",")
    n = a.n or (300 if a.quick else 2000)
    load_before = load_average()
    rows = []
    params = {"workers": a.workers, "seconds": seconds, "rate": a.rate, "n": None if a.store else n, "quick": a.quick,
              "load_average_before": load_before, "consumer_target_ms": CONSUMER_TARGET_MS}
    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="scaling-data-") as tmp:
        stores = {"given": a.store} if a.store else make_stores(Path(tmp), n, layouts)
        for layout in stores:
            for mode in modes:
                for engine in engines:   # engines side by side, one after the other, on the same data
                    if engine == NATIVE and mode != "float":
                        continue
                    row = probe(stores[layout], mode, engine, a.workers, seconds, a.rate, spy)
                    row["layout"], row["load_average"] = layout, load_average()
                    rows.append(row)   # written at once: a run stopped at a time limit keeps its rows
                    write_results(NAME, rows, params, a.out, machine=machine, quick=a.quick, save=a.save)
                    say(f"{layout:<8} {mode:<8} {engine:<9} {row['img_s']:7.0f} img/s  consumer GIL "
                        f"{row['consumer_gil_ms_per_image']:.4f} ms/img  worker GIL "
                        f"{row['worker_gil_ms_per_own_image'] if row['worker_gil_ms_per_own_image'] is not None else '-'}"
                        f" ms/own img  load {row['load_average'][0]}")
    say(machine_line(machine))
    say(f"load average before: {load_before}, after: {load_average()} (GIL figures are inflated under load)")
    table = [{"layout": r["layout"], "mode": r["mode"], "engine": r["engine"], "img_s": r["img_s"],
              "consumer_ms": r["consumer_gil_ms_per_image"], "ceiling": r["consumer_ceiling_img_s"],
              "worker_ms_own": r["worker_gil_ms_per_own_image"], "met": r["consumer_target_met"]} for r in rows]
    say(format_table(table, [(k, k) for k in table[0]]))
    write_results(NAME, rows, params | {"load_average_after": load_average()}, a.out, machine=machine,
                  quick=a.quick, save=a.save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
