"""A store of many records without as many files: the records are written straight
through the packer's writers, from memory.

`feedline pack` reads a folder; a million files would take longer to create and list
than to pack. Here a pool of distinct tiny photo-like JPEGs (64x48 crops of the photos
feedline ships, by `feedline.sample.make_image`, a few KiB each) is made once, and
record i holds pool[i % pool size]. Records are class-sorted as a folder pack is
(1,000 classes of consecutive records, paths ``cls_LLLL/img_IIIIIIII.jpg``). They go
through `converters.writers.make_writer` exactly as the packer sends them: chunks of
``commit_every`` records, each with its journal entry (labels, sizes, paths, lengths,
checksums), then the columns and metadata, one fsync, a rename. What is not exercised
is the packer's reading and checking of source files (bench/pack.py measures that).
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone

CLASSES = 1000
POOL = 4096
SIZE = (64, 48)   # width, height


@dataclass(frozen=True)
class WrittenStore:
    path: str
    records: int
    seconds: float | None   # writing it (read back from its note when found in the cache)
    bytes: int

    @property
    def records_per_s(self) -> float | None:
        return self.records / self.seconds if self.seconds else None

    @property
    def mib_per_s(self) -> float | None:
        return self.bytes / 2**20 / self.seconds if self.seconds else None


def jpeg_pool(size: int = POOL, seed: int = 0) -> list[bytes]:
    """``size`` distinct tiny photo-like JPEGs."""
    from feedline.sample import _load_photos, make_image
    photos = _load_photos()
    rng = random.Random(seed)
    return [make_image(rng, photos[rng.randrange(len(photos))], sizes=[SIZE]) for _ in range(size)]


def label_of(i: int, n: int) -> int:
    return i * CLASSES // n


def path_of(i: int, n: int) -> str:
    return f"cls_{label_of(i, n):04d}/img_{i:08d}.jpg"


def cached_store(folder: str, n: int, ext: str, pool: list[bytes] | None = None) -> WrittenStore:
    """``folder/records-N.EXT``, written now unless it is there already."""
    path = os.path.join(folder, f"records-{n}.{ext}")
    note = path + ".write.json"   # how long the writing took, kept with the store
    if os.path.exists(path) and os.path.exists(note):
        with open(note) as fh:
            return WrittenStore(path, n, **json.load(fh))
    os.makedirs(folder, exist_ok=True)
    written = write_store(path, n, pool if pool is not None else jpeg_pool())
    with open(note, "w") as fh:
        json.dump({"seconds": written.seconds, "bytes": written.bytes}, fh)
    return written


def write_store(out: str, n: int, pool: list[bytes], commit_every: int = 1000) -> WrittenStore:
    """``n`` records from ``pool`` written to ``out`` (.lmdb or .h5) as `feedline pack` writes them."""
    from converters.journal import JournalEntry
    from converters.options import PackOptions, format_for
    from converters.writers import make_writer
    from feedline import __version__
    from feedline.dataset.format import checksum, column_bytes, make_meta

    started = time.perf_counter()
    fmt = format_for(out, None)
    wanted = PackOptions().output_options(fmt)
    sums = [checksum(data) for data in pool]
    writer = make_writer(fmt, out)
    writer.start(resume=False)
    labels, sizes, paths, lengths, checksums = [], [], [], [], []
    try:
        for chunk, first in enumerate(range(0, n, commit_every)):
            stop = min(n, first + commit_every)
            entry = JournalEntry(chunk=chunk, consumed=stop, first_record=first, options=wanted, digest="bench-scale",
                                 labels=[label_of(i, n) for i in range(first, stop)],
                                 sizes=[[SIZE[1], SIZE[0]]] * (stop - first),
                                 paths=[path_of(i, n) for i in range(first, stop)],
                                 lengths=[len(pool[i % len(pool)]) for i in range(first, stop)],
                                 checksums=[sums[i % len(pool)] for i in range(first, stop)])
            _commit(writer, [pool[i % len(pool)] for i in range(first, stop)], entry)
            for column, values in ((labels, entry.labels), (sizes, entry.sizes), (paths, entry.paths),
                                   (lengths, entry.lengths), (checksums, entry.checksums)):
                column += values
        meta = make_meta(count=n, classes=[f"cls_{k:04d}" for k in range(CLASSES)], pack_options=wanted,
                         source="bench/scale_store.py (generated in memory)",
                         created=datetime.now(timezone.utc).isoformat(timespec="seconds"), feedline_version=__version__)
        writer.finish(column_bytes(labels, sizes, paths, checksums), meta, lengths)
        os.replace(writer.partial_path, out)
        writer.discard()
    except BaseException:
        writer.discard()
        raise
    return WrittenStore(out, n, time.perf_counter() - started, sum(lengths))


def _commit(writer, images: list[bytes], entry) -> None:
    """One chunk, as the packer commits it: the records added one by one, then the journal
    entry; again from the first record when LMDB's map was full (ChunkLost)."""
    from converters.writer_base import ChunkLost
    while True:
        try:
            for k, data in enumerate(images):
                writer.add(entry.first_record + k, data)
            writer.commit(entry)
            return
        except ChunkLost:
            continue
