"""Orchestration of one pack: scan, check, convert, write, resume, rename.

Files are consumed in scan order. This thread reads and checks each one (cheap:
see `ordered` for why it is not spread over threads); files that need converting
go to a thread pool; this thread also hands each record to the writer as soon as
it is checked, so its bytes are freed at once and the next file's read reuses
their memory (holding a chunk's records until its commit costs CPU time), and the
kernel writes each committed chunk to disk in the background (see
`writer_base.start_writeback`). No writer thread: py-lmdb takes the GIL back after
every put, so one makes LMDB packs slower, and HDF5 packs erratic. Every
``commit_every`` files (or ``commit_bytes``) a chunk is committed together with its
journal entry, so an interrupted pack resumes from its last commit. Nothing appears
at OUT until the data set is complete: it is written as OUT.partial (plus side files
for HDF5) and renamed, so an existing OUT is replaced only by a complete one.
"""
from __future__ import annotations

import logging
import os
import time

from feedline import __version__
from feedline.dataset.durable import fsync_folder
from feedline.core.errors import DiskFullError, PackError
from feedline.dataset.format import checksum, column_bytes, make_meta
from feedline.dataset.scan import ScanResult, scan_folder, shuffled
from feedline.dataset.unwritable import file_in_the_way

from .complete import INPUT_DIGEST_KEY, report_complete
from .decode_check import DecodeCheck, DecodeChecker
from .disk_space import check_room_for, write_failed
from .journal import JournalEntry, check_entries, scan_digest
from .normalize import Conversion, Record, check_file, convert
from .options import Layout, OnError, PackCheck, PackOptions, format_for
from .records import (TargetRefused, add_target_columns, check_resizing, check_targets, refuse_unframed,
                      with_flip_pairs)
from .ordered import OrderedPool
from .report import PackReport, Skip, nothing_packed, write_error_report
from .progress import progress_bar
from .tally import Tally, add_mask
from .writer_base import ChunkLost, Writer
from .writers import make_writer

log = logging.getLogger(__name__)


class _BadInput(Exception):
    """A bad file under --on-error fail."""

    def __init__(self, skip: Skip):
        super().__init__(skip.detail)
        self.skip = skip


def pack(src: str | os.PathLike, out: str | os.PathLike, options: PackOptions) -> PackReport:
    """Pack the image folder ``src`` into ``out``; see `converters.pack` for the contract."""
    started = time.perf_counter()
    out = os.path.abspath(os.fspath(out))
    fmt = format_for(out, options.format)  # a bad extension fails before the scan
    resuming_complete = options.resume and not options.overwrite and os.path.isfile(out)
    if not resuming_complete:
        _check_out(out, options)
    scan = with_flip_pairs(shuffled(scan_folder(os.fspath(src), options.labels_csv), options.shuffle),
                           options.flip_pairs)
    if resuming_complete:
        return report_complete(scan, out, options.output_options(fmt), started)
    # Links not followed and labels CSV mismatches: listed with the skipped files.
    return pack_scan(scan, out, options, not_taken=[Skip.of(p) for p in scan.problems], started=started)


def pack_scan(scan: ScanResult, out: str, options: PackOptions, *, not_taken: list[Skip] | None = None,
              shard: dict | None = None, started: float | None = None) -> PackReport:
    """Pack the files of ``scan`` into ``out`` (absolute); ``shard`` goes into the metadata."""
    started = time.perf_counter() if started is None else started
    not_taken = not_taken or []
    fmt = format_for(out, options.format)
    _check_out(out, options)
    check_resizing(scan, options.max_side)
    writer = make_writer(fmt, out, options.resume)
    leftovers = writer.leftovers()
    if leftovers and not options.resume:
        log.warning("%s: discarding an unfinished pack (pass --resume to continue it)", leftovers[0])
    wanted = options.output_options(fmt)
    digest = scan_digest(scan)
    entries = writer.start(options.resume)
    tally = Tally()
    try:
        check_entries(entries, wanted, digest, writer.partial_path)
        for entry in entries:
            tally.add(entry)
        resumed_from = tally.consumed
        if options.resume and entries:
            log.info("resuming after %d of %d files", resumed_from, len(scan.paths))
        elif options.resume:
            log.info("%s: nothing to resume; packing from the start", writer.partial_path)
        if options.space_check:
            _check_space(scan, tally.consumed, out, fmt.value, writer, fresh=not entries,
                         layout=options.layout.value)
        _consume(scan, writer, options, tally, wanted, digest)
        skipped = not_taken + tally.skipped
        if not tally.labels:
            writer.discard()
            raise PackError(nothing_packed(scan.root, len(scan.paths), skipped))
        meta = make_meta(count=len(tally.labels), classes=scan.classes, pack_options=wanted,
                         source=scan.root, created=_utc_now(), feedline_version=__version__, shard=shard,
                         fields=tally.packed_fields(scan), class_lists=scan.class_lists)
        meta[INPUT_DIGEST_KEY] = digest
        # Known only when every JPEG's data was read: decoded, or transcoded to the grid.
        if options.check is PackCheck.DECODE or options.layout is Layout.GRID:
            meta["jpeg_warnings"] = tally.jpeg_warnings
        columns = column_bytes(tally.labels, tally.sizes, tally.paths, tally.checksums)
        clipped = add_target_columns(columns, scan, tally.paths, tally.sizes,   # boxes clipped to their image
                                     tally.oriented, options.labels_frame, tally.mask_checksums)
        writer.finish(columns, meta, tally.lengths, tally.mask_lengths)
        try:
            report_path = write_error_report(out, skipped)
            os.replace(writer.partial_path, out)
        except OSError as exc:
            raise write_failed(out, exc) from None
        fsync_folder(os.path.dirname(out))
        writer.discard()  # the side files; the partial file itself is OUT now
    except TargetRefused:   # the labels file must change: nothing to resume
        writer.discard()
        raise
    except _BadInput as bad:
        writer.discard()
        s = bad.skip
        raise PackError(f"{os.path.join(scan.root, s.path)}: {s.reason.value}: {s.detail} "
                        f"(--on-error fail: stopped; nothing written at {out})") from None
    except KeyboardInterrupt:
        writer.close()
        log.warning("interrupted: %d of %d files committed in %s; rerun with --resume to continue",
                    tally.consumed, len(scan.paths), writer.partial_path)
        raise
    except BaseException:
        writer.close()  # keep what is committed for --resume
        raise
    return PackReport(out=out, format=fmt.value, found=len(scan.paths) + len(not_taken), packed=len(tally.labels),
                      converted=tally.converted, jpeg_warnings=tally.jpeg_warnings, skipped=skipped, bytes_in=tally.source_bytes,
                      bytes_out=sum(tally.lengths), seconds=time.perf_counter() - started,
                      resumed_from=resumed_from, error_report=report_path, boxes_clipped=clipped)


def _check_space(scan: ScanResult, start: int, out: str, fmt: str, writer: Writer, fresh: bool,
                 layout: str = "original") -> None:
    """Refuse before writing when the files still to pack will not fit; a fresh pack
    leaves nothing behind, a resumed one keeps what it has."""
    try:
        check_room_for(out, fmt, scan.root, scan.paths[start:], layout)
    except DiskFullError:
        if fresh:
            writer.discard()
        raise


def _check_out(out: str, options: PackOptions) -> None:
    if os.path.isdir(out):
        raise PackError(f"{out} is a folder; name an output file such as OUT.lmdb or OUT.h5")
    if os.path.lexists(out) and not options.overwrite:
        raise PackError(f"{out} already exists; pass --overwrite to replace it "
                        "(the old file stays until the new one is complete)")
    folder = os.path.dirname(out)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        blocker = file_in_the_way(out)
        why = f"{blocker} is a file, not a folder" if blocker is not None else exc.strerror
        raise PackError(f"{folder}: cannot create the output folder ({why}); "
                        "choose a writable place for OUT") from None


def _consume(scan: ScanResult, writer: Writer, options: PackOptions, tally: Tally,
             wanted: dict, digest: str) -> None:
    """Check, convert and commit the files not consumed yet, in scan order. A chunk the
    writer loses (ChunkLost: LMDB's map was full and has grown) is packed again from its
    first file."""
    bar = progress_bar(options.progress, len(scan.paths), tally.consumed)
    checker = DecodeChecker() if options.check is PackCheck.DECODE else None
    grid = masks = None
    if options.layout is Layout.GRID:
        from .grid_transcode import GridTranscoder  # numpy and libjpeg only for grid packs
        grid = GridTranscoder()
    if scan.masks is not None:
        from .masks import MaskJob, MaskPacker   # numpy, Pillow and zlib only for packs with masks
        masks = MaskPacker(scan, options.labels_frame)

    def first(rel: str):
        outcome = check_file(scan.root, rel, options)
        slow = checker is not None or grid is not None
        job = DecodeCheck(rel, outcome) if slow and isinstance(outcome, Record) else outcome
        return MaskJob(rel, job) if masks is not None and not isinstance(job, Skip) else job

    def image(job):
        done = convert(job, options) if isinstance(job, Conversion) else checker(job) if checker else job.record
        return grid(job.rel, done) if grid is not None else done

    def second(job):
        if masks is None or not isinstance(job, MaskJob):
            return image(job)
        return masks(job.rel, job.job if isinstance(job.job, Record) else image(job.job))

    try:
        with OrderedPool(options.threads) as pool:
            while True:
                deferred = (Conversion, DecodeCheck) + ((MaskJob,) if masks is not None else ())
                outcomes = pool.map(scan.paths[tally.consumed:], first, second, deferred)
                try:
                    return _commit_outcomes(outcomes, scan, writer, options, tally, wanted, digest, bar)
                except ChunkLost as lost:
                    log.debug("%s; packing again from file %d", lost, tally.consumed)
                finally:
                    outcomes.close()  # cancels the conversions still queued
    finally:
        bar.close()


def _commit_outcomes(outcomes, scan: ScanResult, writer: Writer, options: PackOptions, tally: Tally,
                     wanted: dict, digest: str, bar) -> None:
    """Hand each record to the writer as it comes, in scan order, and commit every
    ``commit_every`` files or ``commit_bytes`` of records."""
    entry = _new_entry(tally, wanted, digest)
    pending_bytes = read = 0
    started = time.perf_counter()
    for i, outcome in enumerate(outcomes, tally.consumed):
        if isinstance(outcome, Skip):
            if options.on_error is OnError.FAIL:
                raise _BadInput(outcome)
            log.debug("skipped %s: %s: %s", outcome.path, outcome.reason.value, outcome.detail)
            entry.skipped.append(outcome.row())
        else:
            data = outcome.data
            if outcome.orientation != 1:   # turned: its boxes and keypoints must say in which frame they are
                refuse_unframed(scan, scan.paths[i], outcome.orientation, options.labels_frame)
                entry.oriented.append([entry.first_record + len(entry.labels), outcome.orientation])
            writer.add(entry.first_record + len(entry.labels), data)
            if outcome.mask is not None:
                add_mask(writer, entry, outcome.mask)
            entry.labels.append(scan.labels[i])
            entry.sizes.append([outcome.height, outcome.width])
            entry.paths.append(scan.paths[i])
            entry.lengths.append(len(data))
            entry.checksums.append(checksum(data))
            entry.converted += outcome.converted is not None
            entry.jpeg_warnings += outcome.warning is not None
            entry.source_bytes += outcome.source_bytes
            pending_bytes += len(data)
            read += outcome.source_bytes
        entry.consumed = i + 1
        if i >= bar.n:  # files of a chunk packed again count once
            bar.update(1)
            if entry.consumed % 64 == 0:
                bar.set_postfix_str(_rate(read, started), refresh=False)
        if entry.consumed - tally.consumed >= options.commit_every or pending_bytes >= options.commit_bytes:
            # as verify will: the sizes are known now
            check_targets(scan, entry.paths, entry.sizes, entry.oriented, entry.first_record, options.labels_frame)
            writer.commit(entry)
            tally.add(entry)
            entry, pending_bytes = _new_entry(tally, wanted, digest), 0
    if entry.consumed > tally.consumed:
        check_targets(scan, entry.paths, entry.sizes, entry.oriented, entry.first_record, options.labels_frame)
        writer.commit(entry)
        tally.add(entry)


def _new_entry(tally: Tally, wanted: dict, digest: str) -> JournalEntry:
    return JournalEntry(chunk=tally.chunks, consumed=tally.consumed, first_record=len(tally.labels),
                        options=wanted, digest=digest)


def _utc_now() -> str:
    """Now, as datetime.now(timezone.utc).isoformat(timespec="seconds") says it (without
    importing datetime: start-up counts)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def _rate(nbytes: int, started: float) -> str:
    seconds = max(time.perf_counter() - started, 1e-9)
    return f"{nbytes / 2**20 / seconds:.1f} MiB/s"
