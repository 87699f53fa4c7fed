"""Packing into a bucket: `feedline pack SRC s3://bucket/train.lmdb --num-shards N`.

Each shard is packed into a local staging folder (under the cache folder), uploaded
when complete, then its head (``NAME.head``: its columns, so that readers need not fetch
shards they will not read), then removed locally: the local disk holds one shard at a
time. The index (``train.shards.json``) is uploaded last, so a reader never finds a
partial data set. ``resume`` keeps the shards whose head is in the bucket already for
this very pack (same input, options and split: the pack id); a killed upload therefore
continues to the same objects. A shard or a complete data set of another pack under the same
names is replaced only with ``overwrite``; the refusal says which options (or split) differ.
"""
from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import time
from dataclasses import replace

from feedline.core.errors import PackError
from feedline.dataset.format import SHARD_INDEX_FORMAT, SHARD_INDEX_VERSION, shard_index, shard_name
from feedline.dataset.scan import scan_folder, shuffled
from feedline.stores.detect import open_file
from feedline.stores.remote import Bucket, MissingObjectError, RemoteOptions, from_environment
from feedline.stores.shard_head import HEAD_SUFFIX, head_bytes, parse_head

from .options import PackOptions, format_for
from .packer import pack_scan
from .report import PackReport, Skip
from .shards import (combined_report, common_pack_options, other_pack, pack_id_of, plan_shards,
                     refuse_other_index, scan_part)

log = logging.getLogger(__name__)


def pack_to_bucket(src: str | os.PathLike, url: str, options: PackOptions,
                   remote: RemoteOptions | None = None) -> PackReport:
    """Pack ``src`` into shards of ``url`` (s3://bucket/OUT.lmdb) and its index OUT.shards.json."""
    started = time.perf_counter()
    remote = from_environment(remote)
    if not options.sharded:
        raise PackError(f"{url}: a bucket holds sharded data sets: add --num-shards N (or --shard-size)")
    if options.shard_index is not None:
        raise PackError(f"{url}: --shard-index packs one part on one machine; to a bucket, pack all shards "
                        "in one run (it uploads each as it completes)")
    bucket, key = Bucket.of(url, remote)
    fmt = format_for(key, options.format)
    scan = shuffled(scan_folder(os.fspath(src), options.labels_csv), options.shuffle)
    ranges = plan_shards(scan, options)
    count = len(ranges)
    pack_id = pack_id_of(scan, options, fmt, ranges)
    index_key = shard_index(key)
    if bucket.size(index_key) is not None and not (options.overwrite or options.resume):
        raise PackError(f"{bucket.url(index_key)} already exists; pass --overwrite to replace the data set, "
                        "or --resume to finish an upload of the same pack")
    shard_keys = [posixpath.join(posixpath.dirname(key), posixpath.basename(shard_name(key, k, count)))
                  for k in range(count)]
    wanted = options.output_options(fmt)
    if not options.overwrite:
        _refuse_another_pack(bucket, index_key, pack_id, wanted, count, scan.root)
    done = {k: _uploaded(bucket, shard_keys[k], pack_id, wanted, count, scan.root) for k in range(count)
            if options.resume and not options.overwrite}
    staging = os.path.join(remote.cache_root, "upload", pack_id)
    os.makedirs(staging, exist_ok=True)
    local_out = os.path.join(staging, posixpath.basename(key))
    reports, entries, metas = [], [], []
    for k, shard_key in enumerate(shard_keys):
        name = posixpath.basename(shard_key)
        not_taken = [Skip.of(p) for p in scan.problems] if k == 0 else []
        if done.get(k) is not None:
            log.info("%s: already uploaded (resume)", bucket.url(shard_key))
            meta, size = done[k]
            reports.append(PackReport(out=bucket.url(shard_key), format=fmt.value, found=meta["count"],
                                      packed=meta["count"], converted=0, resumed_from=meta["count"]))
        else:
            local = shard_name(local_out, k, count)
            report = pack_scan(scan_part(scan, *ranges[k]), local, replace_out(options), not_taken=not_taken,
                               shard={"index": k, "of": count, "pack_id": pack_id})
            with open_file(local) as store:
                head, meta = head_bytes(store), store.meta
            size = os.path.getsize(local)
            bucket.upload(local, shard_key)
            bucket.write(shard_key + HEAD_SUFFIX, head)   # last: a head in the bucket marks the shard complete
            _remove_local(local)
            # Where the shard is now; its list of skipped files stays in the report alone.
            reports.append(replace(report, out=bucket.url(shard_key), error_report=None))
        entries.append({"file": name, "count": meta["count"], "bytes": size})
        metas.append(meta)
    index = {"format": SHARD_INDEX_FORMAT, "version": SHARD_INDEX_VERSION,
             "format_version": metas[0]["format_version"], "kind": fmt.value, "count": sum(e["count"] for e in entries),
             "classes": metas[0]["classes"], "checksums": True, "pack_id": pack_id,
             "pack_options": common_pack_options(metas), "source": metas[0].get("source"), "shards": entries}
    bucket.write(index_key, (json.dumps(index, indent=1, sort_keys=True) + "\n").encode())
    shutil.rmtree(staging, ignore_errors=True)
    log.info("%s: %d shards, %d records", bucket.url(index_key), count, index["count"])
    return combined_report(reports, bucket.url(index_key), fmt.value, time.perf_counter() - started)


def replace_out(options: PackOptions) -> PackOptions:
    """Each local shard is written afresh (a leftover of a killed run is replaced)."""
    return replace(options, resume=False, overwrite=True, progress=options.progress)


def _refuse_another_pack(bucket: Bucket, index_key: str, pack_id: str, wanted: dict, count: int, root: str) -> None:
    """A complete data set at the index of another pack is replaced only with --overwrite."""
    try:
        raw = bucket.read(index_key)
    except MissingObjectError:
        return
    refuse_other_index(raw, bucket.url(index_key), pack_id, wanted, count, root)


def _uploaded(bucket: Bucket, shard_key: str, pack_id: str, wanted: dict, count: int,
              root: str) -> tuple[dict, int] | None:
    """(metadata, size) of a shard of this pack whose upload completed; None when there is none.
    A shard of another pack under that name is refused: --resume continues one pack, and
    packing again over the other's shards would replace them."""
    try:
        raw = bucket.read(shard_key + HEAD_SUFFIX)
    except MissingObjectError:
        return None
    meta = parse_head(raw, bucket.url(shard_key + HEAD_SUFFIX))[0]
    size = bucket.size(shard_key)
    if meta.get("shard", {}).get("pack_id") != pack_id:
        why = other_pack(meta.get("pack_options") or {}, meta.get("shard", {}).get("of"), wanted, count, root)
        raise PackError(f"{bucket.url(shard_key)}: the interrupted pack {why}; rerun with the same options, "
                        "or start over with --overwrite and no --resume")
    return (meta, size) if size is not None else None


def _remove_local(path: str) -> None:
    for leftover in (path, path + ".errors.csv"):
        try:
            os.remove(leftover)
        except FileNotFoundError:
            pass
