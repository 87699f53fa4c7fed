"""Sharded packs: the sorted file list cut into parts, each packed as a complete store
(OUT-00000-of-0000N.EXT), and one index, OUT.shards.json, that names them.

The plan is a pure function of the scan and the options (file counts, or the input
files' sizes for --shard-size in bytes), so machines that scan the same folder agree
on it: `--shard-index K` packs part K only, and the parts join without repacking.
The index is written when the last shard is complete (by whichever run completes it;
its content does not depend on who writes it), or by `join` (`feedline pack --join OUT`).
"""
from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import time
from dataclasses import replace

from feedline.dataset.durable import fsync_folder
from feedline.core.errors import PackError
from feedline.dataset.format import (SHARD_INDEX_FORMAT, SHARD_INDEX_VERSION, shard_index, shard_name)
from feedline.dataset.scan import ScanResult, scan_folder, shuffled
from feedline.stores import ShardedStore, open_dataset

from .disk_space import check_room_for, file_sizes
from .journal import differences, scan_digest
from .options import PackOptions, format_for
from .packer import pack_scan
from .records import with_flip_pairs
from .report import PackReport, Skip

log = logging.getLogger(__name__)


def plan_shards(scan: ScanResult, options: PackOptions) -> list[tuple[int, int]]:
    """[start, stop) ranges of ``scan.paths``, one per shard, in order."""
    n = len(scan.paths)
    if options.num_shards is not None:
        if options.num_shards > n:
            raise PackError(f"{scan.root}: {options.num_shards} shards of {n} files: give at most {n}")
        k = options.num_shards
        return [(i * n // k, (i + 1) * n // k) for i in range(k)]
    if options.shard_records is not None:
        step = options.shard_records
        return [(i, min(i + step, n)) for i in range(0, n, step)]
    ranges, start, size = [], 0, 0
    for i, length in enumerate(file_sizes(scan.root, scan.paths)):
        if i > start and size + length > options.shard_bytes:
            ranges.append((start, i))
            start, size = i, 0
        size += length
    return ranges + [(start, n)]


def pack_id_of(scan: ScanResult, options: PackOptions, fmt, ranges: list[tuple[int, int]]) -> str:
    """The same for every shard of one pack, on any machine: the input, the options that
    shape the output (the labels file by content, not by its path) and the plan."""
    # scan_digest covers the fields' values: shards packed from other labels files do not join.
    wanted = shaping(options.output_options(fmt))
    return hashlib.sha256(json.dumps([scan_digest(scan), wanted, ranges], sort_keys=True).encode()).hexdigest()[:32]


def shaping(pack_options: dict) -> dict:
    """The pack options a pack id covers: all but the labels file's path (its content is in the digest)."""
    return {k: v for k, v in pack_options.items() if k != "labels_csv"}


def other_pack(then_options: dict, then_count: int, wanted: dict, count: int, root: str) -> str:
    """How an earlier pack of the same OUT differs from this one, for a refusal: its options,
    else its split, else its input."""
    diff = differences(shaping(then_options), shaping(wanted))
    if diff:
        return f"used other options ({diff})"
    if then_count != count:
        return f"cut the files into {then_count} shards, this run into {count}"
    return f"was made from other files or labels than {root} holds now, or cut elsewhere (--shard-size)"


def refuse_other_index(raw: bytes, where: str, pack_id: str, wanted: dict, count: int, root: str) -> None:
    """PackError unless ``raw`` is the index of this pack: a complete data set of another one is
    replaced only with --overwrite."""
    try:
        had = json.loads(raw)
    except ValueError:
        had = None
    if not isinstance(had, dict) or not isinstance(had.get("pack_options"), dict):
        raise PackError(f"{where} already exists and is not a shard index feedline wrote; pass --overwrite to "
                        "replace it")
    if had.get("pack_id") != pack_id:
        why = other_pack(had["pack_options"], len(had.get("shards") or []), wanted, count, root)
        raise PackError(f"{where}: a complete data set whose pack {why}; pass --overwrite to replace it")


def scan_part(scan: ScanResult, start: int, stop: int) -> ScanResult:
    return replace(scan.part(range(start, stop)), problems=[])


def pack_sharded(src: str | os.PathLike, out: str | os.PathLike, options: PackOptions) -> PackReport:
    """Pack ``src`` into shards of ``out``; all of them, or only ``options.shard_index``."""
    started = time.perf_counter()
    out = os.path.abspath(os.fspath(out))
    fmt = format_for(out, options.format)
    scan = with_flip_pairs(shuffled(scan_folder(os.fspath(src), options.labels_csv), options.shuffle),
                           options.flip_pairs)
    ranges = plan_shards(scan, options)
    count = len(ranges)
    if options.shard_index is not None and options.shard_index >= count:
        raise PackError(f"--shard-index {options.shard_index}: this split has {count} shards (0..{count - 1})")
    pack_id = pack_id_of(scan, options, fmt, ranges)
    _refuse_another_pack(out, count, pack_id, options, options.output_options(fmt), scan.root)
    wanted = range(count) if options.shard_index is None else [options.shard_index]
    todo = [k for k in wanted if not _done(shard_name(out, k, count), pack_id, options)]
    clash = [shard_name(out, k, count) for k in todo if os.path.lexists(shard_name(out, k, count))]
    if clash and not options.overwrite:
        raise PackError(f"{clash[0]} already exists ({len(clash)} of the shards to pack do); pass --resume to "
                        "keep the complete shards of this pack, or --overwrite to replace them")
    if options.space_check and todo:
        check_room_for(out, fmt.value, scan.root, [p for k in todo for p in scan.paths[slice(*ranges[k])]],
                       options.layout.value)
    reports = []
    for k in wanted:
        name = shard_name(out, k, count)
        # The scan's own problems (links not followed, labels CSV mismatches) go to shard 0's report.
        not_taken = [Skip.of(p) for p in scan.problems] if k == 0 else []
        if k not in todo:
            log.info("%s: already packed (resume)", name)
            reports.append(_report_of_done(name, fmt.value, not_taken))
            continue
        reports.append(pack_scan(scan_part(scan, *ranges[k]), name, options, not_taken=not_taken,
                                 shard={"index": k, "of": count, "pack_id": pack_id}))
    index = None
    if all(os.path.exists(shard_name(out, k, count)) for k in range(count)):
        index = join(out, count)
    else:
        log.info("%d of %d shards of %s are here; once all are, `feedline pack --join %s` writes the index "
                 "(the run that packs the last one writes it too)",
                 sum(os.path.exists(shard_name(out, k, count)) for k in range(count)), count, out, out)
    return combined_report(reports, index or reports[0].out, fmt.value, time.perf_counter() - started)


def _refuse_another_pack(out: str, count: int, pack_id: str, options: PackOptions, wanted: dict, root: str) -> None:
    """An earlier pack of OUT that this one must neither replace nor continue: a complete set
    of another pack (its index) without --overwrite, and with --resume, shards (complete or
    begun) of another pack or split; each refusal says what differs."""
    if options.overwrite:
        return
    index = shard_index(out)
    if os.path.exists(index):
        with open(index, "rb") as fh:
            refuse_other_index(fh.read(), index, pack_id, wanted, count, root)
    if not options.resume:
        return
    redo = "or start over with --overwrite and no --resume"
    for name, then, complete in _shard_files(out):
        if then != count:
            raise PackError(f"{name}: the interrupted pack cut the files into {then} shards, this run into {count}; "
                            f"rerun with the same --num-shards or --shard-size, {redo}")
        if complete:
            with open_dataset(name) as store:
                meta = store.meta
            if meta.get("shard", {}).get("pack_id") != pack_id:
                why = other_pack(meta.get("pack_options") or {}, count, wanted, count, root)
                raise PackError(f"{name}: the interrupted pack {why}; rerun with the same options, {redo}")


def _shard_pattern(out: str):
    """OUT-NNNNN-of-NNNNN.EXT of ``out`` (absolute), then anything (a partial's suffixes)."""
    stem, ext = os.path.splitext(out)
    return re.compile(re.escape(os.path.basename(stem)) + _SHARD_RE + re.escape(ext))


def _shard_files(out: str) -> list[tuple[str, int, bool]]:
    """(path, shards in its split, complete) of each shard of ``out`` here, complete or begun."""
    stem, ext = os.path.splitext(out)
    pattern, found = _shard_pattern(out), []
    for path in sorted(glob.glob(glob.escape(stem) + "-*-of-*" + glob.escape(ext) + "*")):
        match = pattern.match(os.path.basename(path))
        rest = os.path.basename(path)[match.end():] if match else None
        if rest == "" or (rest is not None and rest.startswith(".partial")):
            found.append((path, int(match[2]), rest == ""))
    return found


def _done(name: str, pack_id: str, options: PackOptions) -> bool:
    """A complete shard of this pack that --resume keeps."""
    if not (options.resume and os.path.exists(name)):
        return False
    with open_dataset(name) as store:
        return store.meta.get("shard", {}).get("pack_id") == pack_id


def _report_of_done(name: str, fmt: str, not_taken: list[Skip]) -> PackReport:
    from .report import read_error_report
    with open_dataset(name) as store:
        packed = len(store)
    errors = name + ".errors.csv"
    skipped = read_error_report(errors) if os.path.exists(errors) else []
    return PackReport(out=name, format=fmt, found=packed + len(skipped), packed=packed, converted=0,
                      skipped=skipped, resumed_from=packed + len(skipped) - len(not_taken),
                      error_report=errors if skipped else None)


def combined_report(reports: list[PackReport], out: str, fmt: str, seconds: float) -> PackReport:
    return PackReport(out=out, format=fmt, found=sum(r.found for r in reports), packed=sum(r.packed for r in reports),
                      converted=sum(r.converted for r in reports),
                      jpeg_warnings=sum(r.jpeg_warnings for r in reports), skipped=[s for r in reports for s in r.skipped],
                      bytes_in=sum(r.bytes_in for r in reports), bytes_out=sum(r.bytes_out for r in reports),
                      seconds=seconds, resumed_from=sum(r.resumed_from for r in reports), shards=reports,
                      boxes_clipped=sum(r.boxes_clipped for r in reports))


def common_pack_options(metas: list[dict]) -> dict:
    """The pack options every shard's metadata shares (as ShardedStore states them)."""
    options = [m.get("pack_options") or {} for m in metas]
    return {k: v for k, v in options[0].items() if all(o.get(k, object()) == v for o in options[1:])}


_SHARD_RE = r"-(\d{5})-of-(\d{5})"


def join(out: str | os.PathLike, count: int | None = None) -> str:
    """Write OUT.shards.json for the shards OUT-*-of-N.EXT next to ``out`` (of ``count``
    shards, when given); returns its path. Checks the set as opening it does: each shard
    once, none missing, one pack, one class list."""
    out = os.path.abspath(os.fspath(out))
    stem, ext = os.path.splitext(out)
    found = [path for path, _, complete in _shard_files(out) if complete]
    pattern = _shard_pattern(out)
    if count is not None:
        found = [f for f in found if int(pattern.match(os.path.basename(f))[2]) == count]
    if not found:
        raise PackError(f"{out}: no shards to join (looked for {os.path.basename(stem)}-NNNNN-of-NNNNN{ext} "
                        f"in {os.path.dirname(out)})")
    splits = sorted({int(pattern.match(os.path.basename(f))[2]) for f in found})
    if len(splits) > 1:
        raise PackError(f"{out}: shards of {len(splits)} different splits ({', '.join(f'of {n}' for n in splits)}) "
                        "lie here; remove the old ones and join again")
    with ShardedStore.from_paths(found) as store:
        index = {"format": SHARD_INDEX_FORMAT, "version": SHARD_INDEX_VERSION,
                 "format_version": store.meta["format_version"], "kind": store.kind, "count": len(store),
                 "classes": store.classes, "checksums": store.checksums is not None,
                 "pack_id": store.stores[0].meta.get("shard", {}).get("pack_id"),
                 "pack_options": store.meta["pack_options"], "source": store.meta["source"],
                 "shards": [{"file": os.path.basename(s.filename), "count": len(s)} for s in store.stores]}
    path = shard_index(out)
    tmp = f"{path}.{os.getpid()}.partial"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(index, fh, indent=1, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)  # several machines may finish at once: each writes the same index
    fsync_folder(os.path.dirname(path))
    log.info("%s: %d shards, %d records", path, len(index["shards"]), index["count"])
    return path
