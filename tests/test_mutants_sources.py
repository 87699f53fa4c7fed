"""The thread source's documented side effects that mutation testing found unpinned
(tests/MUTATION.md): fresh host batches ask Linux for huge pages, and decode threads never
keep a process alive."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from feedline import FeedLoader, open_dataset
from feedline.augment import AugmentSpec
from feedline.choices import OnError, Order
from feedline.config import OutputSpec
from feedline.decoders import get_decoder
from feedline.errors import DecodeError
from feedline.plan import EpochPlan
from feedline.sources.decode_queue import DecodeQueue
from feedline.sources.feed import Feed
from feedline.sources.host_output import OutputRing
from feedline.sources.policy import BadRecordPolicy
from feedline.stats import LoaderStats
from storefiles import make_records, write_lmdb

HUGE_PAGE = 2 << 20


def vm_flags(address: int) -> tuple[int, int, set[str]]:
    """(start, end, VmFlags) of this process's memory mapping that holds ``address``."""
    span = None
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                span = (lo, hi) if lo <= address < hi else None
            elif line.startswith("VmFlags:") and span is not None:
                return span[0], span[1], set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


def test_fresh_host_batches_ask_for_huge_pages(packed_lmdb):
    """Each batch the host ring allocates is advised MADV_HUGEPAGE over every whole
    2 MiB page it covers (the kernel marks such a mapping 'hg'), and over nothing else."""
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=224, num_threads=2, device="cpu", decoder="opencv")
    batches = [x for x, _ in loader]
    assert len(batches) == 6
    for x in batches:
        begin, size = x.data_ptr(), x.untyped_storage().nbytes()
        first = -(-begin // HUGE_PAGE) * HUGE_PAGE
        last = (begin + size) // HUGE_PAGE * HUGE_PAGE
        assert last - first >= HUGE_PAGE, "a 224 x 224 float batch of 8 covers whole huge pages"
        lo, hi, flags = vm_flags(first)
        assert "hg" in flags and lo <= first and last <= hi, "the batch's whole huge pages are advised"
        if lo < first:   # the mapping was split at the advised range: what precedes it is not advised
            assert lo == first or "hg" not in vm_flags(first - 1)[2]


def test_a_loader_left_open_does_not_keep_the_process_alive(packed_lmdb):
    """A script that stops after one batch, without close() or the end of the epoch, exits:
    the decode threads do not hold the interpreter open."""
    # In this process first (where mutation testing sees which code a test reaches): the
    # decode threads a loader starts are daemons.
    loader = FeedLoader(str(packed_lmdb), batch_size=4, size=32, num_threads=2, device="cpu", decoder="opencv")
    it = iter(loader)
    next(it)
    threads = [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]
    assert len(threads) == 2 and all(t.daemon for t in threads)
    it.close()
    script = textwrap.dedent(f"""
        import sys
        from feedline import FeedLoader
        loader = FeedLoader({str(packed_lmdb)!r}, batch_size=4, size=32, num_threads=2, device="cpu",
                            decoder="opencv")
        it = iter(loader)
        next(it)
        sys.modules["__main__"].keep = (loader, it)   # alive until the interpreter exits
        print("done", flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr[-2000:]


@pytest.mark.dali
def test_dali_names_a_record_that_decodes_to_another_size_than_the_store_says(tmp_path):
    """DALI fails the batch (the crop lies outside the real image); the CPU check finds the
    record and says both sizes."""
    records = make_records(6, 2)
    h, w = records.sizes[2]
    records.sizes[2] = (2 * h, 2 * w)
    path = write_lmdb(tmp_path / "sizes.lmdb", records)
    loader = FeedLoader(path, batch_size=3, size=16, device="cpu", decoder="dali", num_threads=1)
    with pytest.raises(Exception, match=rf"decodes to {h}x{w}, but the store records {2 * h}x{2 * w}") as info:
        list(loader)
    assert info.value.index == 2
    [record] = loader.stats.bad_records
    assert (record.index, record.substitute, record.reason) == (2, None, "cannot decode")


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_the_error_of_a_bad_record_reads_as_one_sentence_each(tmp_path, damage):
    """The consumer's error is 'record I (PATH) of FILE: REASON: DETAIL. Check ...': the
    detail ends with one full stop, whether the store's message brings its own (a missing
    record) or the decoder's does not."""
    records = make_records(6, 2)
    if damage == "garbage":
        records.images[3] = b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10
    path = write_lmdb(tmp_path / "bad.lmdb", records, skip=(3,) if damage == "missing" else ())
    loader = FeedLoader(path, batch_size=2, size=16, shuffle=False, num_threads=1, device="cpu", decoder="opencv")
    with pytest.raises(DecodeError) as info:
        list(loader)
    [row] = loader.stats.bad_records
    reason = {"missing": "unreadable", "garbage": "cannot decode"}[damage]
    assert (row.index, row.reason) == (3, reason)
    detail = row.detail if row.detail.endswith(".") else row.detail + "."
    assert str(info.value) == (f"record 3 (class_1/img_003.jpg) of {path}: {reason}: {detail} "
                               "Check the file with `feedline verify`, or pass on_error='substitute'.")
    assert ".." not in str(info.value)
    loader.close()


class ShortOfMemory(OutputRing):
    """The host ring, on a machine that cannot allocate the third batch's tensors."""

    def __init__(self, *args):
        super().__init__(*args)
        self.made = 0

    def target(self, slot):
        self.made += 1
        if self.made == 3:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return super().target(slot)


def test_a_batch_that_cannot_be_allocated_fails_in_order_instead_of_going_missing(packed_lmdb):
    """An allocation failure (out of memory) reaches the consumer after the batches before
    it, and the threads end. Before, the thread died with its slot: the other threads went
    on and the epoch silently skipped that batch (one thread: the consumer waited forever).
    The consumer runs in a thread here so that a hang fails."""
    store = open_dataset(str(packed_lmdb))
    epoch = EpochPlan(AugmentSpec(size=(32, 32)), seed=0, epoch=0, order=Order.SEQUENTIAL, batch_size=4,
                      drop_last=False)
    stats = LoaderStats()
    queue = DecodeQueue(store, get_decoder("opencv"), BadRecordPolicy(store, OnError.RAISE, epoch, stats.ledger),
                        num_threads=2, stats=stats)
    feed = Feed(queue, epoch.batches(store.labels, store.sizes), ShortOfMemory(4, 4, (32, 32), OutputSpec()))
    got, errors = [], []

    def consume():
        try:
            while (batch := feed.next_filled()) is not None:
                got.append((batch.plan.number, tuple(batch.target.images.shape)))
                feed.release(batch.slot)
        except RuntimeError as exc:
            errors.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(timeout=60)
    hung = consumer.is_alive()
    queue.close()   # wakes a consumer still waiting (next_filled returns None) and joins the threads
    consumer.join()
    assert not hung, "the consumer waited forever for a batch no thread would make"
    assert got == [(0, (4, 3, 32, 32)), (1, (4, 3, 32, 32))]
    assert [str(e) for e in errors] == ["DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"]
    assert not [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]


def test_the_thread_time_of_each_stage_is_a_share_of_the_epoch(packed_lmdb):
    """read_s, decode_s and copy_s are seconds the decode threads spent in each stage:
    positive, and none more than the epoch's wall time times the number of threads."""
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_threads=2, device="cpu", decoder="opencv")
    started = time.perf_counter()
    assert sum(len(y) for _, y in loader) == 48
    elapsed = time.perf_counter() - started
    s = loader.stats
    for stage in (s.read_s, s.decode_s, s.copy_s):
        assert 0 < stage <= 2 * elapsed
    loader.close()


def test_raise_mode_stops_decoding_a_failed_batch_and_says_so_at_once(tmp_path):
    """Records 8 and 10 of the last batch are not JPEGs. One decode thread: after record 8
    fails, the rest of that batch is left undecoded (the ledger names record 8 only) and the
    consumer waiting for the batch hears of the failure at once (it ran in a thread here, so
    a consumer left waiting fails the test instead of hanging it)."""
    records = make_records(12, 3)
    for index in (8, 10):
        records.images[index] = b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10
    loader = FeedLoader(write_lmdb(tmp_path / "bad.lmdb", records), batch_size=4, size=16, shuffle=False,
                        num_threads=1, device="cpu", decoder="opencv")
    got, errors = [], []

    def consume():
        try:
            got.extend(y.tolist() for _, y in loader)
        except DecodeError as exc:
            errors.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(timeout=60)
    hung = consumer.is_alive()
    loader.close()
    assert not hung, "the consumer was never told that the batch failed"
    assert got == [[0, 1, 2, 0], [1, 2, 0, 1]]
    assert [e.index for e in errors] == [8]
    assert [(r.index, r.batch, r.position) for r in loader.stats.bad_records] == [(8, 2, 0)]
