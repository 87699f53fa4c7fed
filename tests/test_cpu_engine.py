"""sources/cpu_engine.py: the CPU engine, run by worker processes or threads: the same batches
either way for any number of workers, after a mid-epoch resume, with transforms and with bad
records; a substitute in training follows its own crop and flip (checked against the decoder
and the targets by hand, not against the other runner); a host batch goes back to the ring
only when the consumer asks for the batch after next; raise mode stops at once."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch
from engine_helpers import HOST, epoch_plan, make_workers, queue_of, ring_of
from storefiles import make_records, write_lmdb

from feedline import FeedLoader, TransformSpec, open_dataset
from feedline.core.errors import DecodeError
from feedline.sources.cpu_engine import deliver
from feedline.sources.feed import Feed
from feedline.sources.finisher import Filled, HostFinisher
from feedline.core.stats import LoaderStats
from feedline.transforms import Mixup, RandAugment


def batches(path, engine: str, workers: int, epoch: int = 0, **kw):
    options = dict(batch_size=6, shuffle=True, train=True, size=40, num_workers=workers, device="cpu", seed=3,
                   engine=engine, decoder="simplejpeg")
    options.update(kw)
    with FeedLoader(str(path), **options) as loader:
        loader.set_epoch(epoch)
        return [(x.clone(), y.clone() if isinstance(y, torch.Tensor) else y) for x, y in loader]


def same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))


def jitter(image, rng):   # a user's numpy hook
    return np.clip(image.astype(np.int16) + rng.integers(-8, 9, size=(1, 1, 3)), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("kw", [{}, {"mean": None}, {"dtype": torch.bfloat16, "epoch": 1},
                                {"transforms": [jitter]}], ids=["float", "uint8", "bfloat16", "callable"])
def test_same_batches_as_the_thread_engine_for_1_2_4_workers(packed_lmdb, kw):
    threads = batches(packed_lmdb, "threads", 2, **kw)
    assert len(threads) == 8
    for workers in (1, 2, 4):
        assert same(batches(packed_lmdb, "processes", workers, **kw), threads), workers


def test_a_recipe_and_contiguous_layout_match_too(packed_lmdb):
    from feedline import OutputSpec
    kw = dict(transforms=TransformSpec(transforms=[RandAugment(2, 9)],
                                       batch_transforms=[Mixup(mixup_alpha=0.8, num_classes=4)]),
              output=OutputSpec(channels_last=False, dtype=torch.float16))
    assert same(batches(packed_lmdb, "processes", 2, **kw), batches(packed_lmdb, "threads", 2, **kw))


def test_a_grid_store_matches_the_thread_engine(photo_folder, tmp_path):
    from converters import pack
    grid = tmp_path / "grid.lmdb"
    pack(str(photo_folder), str(grid), layout="grid")
    assert same(batches(grid, "processes", 2), batches(grid, "threads", 2))


def test_a_resumed_epoch_continues_with_the_same_batches(packed_lmdb):
    whole = batches(packed_lmdb, "threads", 2)
    options = dict(batch_size=6, shuffle=True, train=True, size=40, num_workers=2, device="cpu", seed=3,
                   engine="processes", decoder="simplejpeg")
    with FeedLoader(str(packed_lmdb), **options) as first:
        it = iter(first)
        next(it), next(it), next(it)
        state = first.state_dict()
    with FeedLoader(str(packed_lmdb), **options) as resumed:
        resumed.load_state_dict(state)
        rest = [(x.clone(), y.clone()) for x, y in resumed]
    assert same(rest, whole[3:])


def test_workers_live_across_epochs(packed_lmdb):
    with FeedLoader(str(packed_lmdb), batch_size=16, size=32, num_workers=2, device="cpu", train=True,
                    engine="processes") as loader:
        procs = loader.source.workers.procs
        pids = [p.pid for p in procs]
        for epoch in range(3):
            loader.set_epoch(epoch)
            assert sum(len(x) for x, _ in loader) == 48
            assert [p.pid for p in procs] == pids and all(p.is_alive() for p in procs)


DAMAGED = ("class_001/img_0000005.jpg", "class_002/img_0000010.jpg")


@pytest.fixture
def damaged_folder(photo_folder, tmp_path):
    root = tmp_path / "images"
    shutil.copytree(photo_folder, root)
    for rel in DAMAGED:
        (root / rel).write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10)
    return root


def test_bad_records_reach_the_same_ledger_as_with_threads(damaged_folder):
    def run(engine):
        rows, out = [], []
        with FeedLoader(str(damaged_folder), batch_size=5, shuffle=True, size=32, num_workers=2, device="cpu",
                        seed=4, on_error="substitute", engine=engine, decoder="opencv", train=True) as loader:
            for epoch in (0, 1):
                loader.set_epoch(epoch)
                out += [(x.clone(), y.clone()) for x, y in loader]
                rows += [(r.epoch, r.batch, r.position, r.index, r.path, r.reason, r.substitute)
                         for r in loader.stats.bad_records]
        return rows, out
    thread_rows, thread_batches = run("threads")
    process_rows, process_batches = run("processes")
    assert len(thread_rows) == 4 and all(row[6] is not None for row in thread_rows)
    assert process_rows == thread_rows
    assert same(process_batches, thread_batches)


def test_raise_mode_names_the_record(damaged_folder):
    with FeedLoader(str(damaged_folder), batch_size=5, size=32, num_workers=2, device="cpu", train=True,
                    engine="processes", decoder="opencv") as loader:
        with pytest.raises(Exception) as info:
            for _ in loader:
                pass
        assert info.value.path in DAMAGED
        [row] = loader.stats.bad_records
        assert row.path == info.value.path and row.substitute is None and row.reason == "cannot decode"


def test_a_failing_user_transform_reaches_the_consumer(packed_lmdb):
    def broken(image, rng):
        raise ValueError("the hook broke")
    with FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_workers=2, device="cpu", train=True,
                    engine="processes", transforms=[broken]) as loader:
        with pytest.raises(ValueError, match="the hook broke"):
            next(iter(loader))
        assert not loader.stats.bad_records


def one_thread(image, rng):
    if torch.get_num_threads() != 1:
        raise RuntimeError(f"torch runs {torch.get_num_threads()} threads in a worker")
    return image


def test_torch_runs_on_the_workers_own_thread(packed_lmdb):
    """A forked worker's torch uses one thread (the parent's OpenMP pool, copied by fork,
    stalls a worker's RandAugment tens of times over)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_workers=2, device="cpu", train=True,
                        engine="processes", transforms=[one_thread]) as loader:
            assert sum(len(x) for x, _ in loader) == 48
    finally:
        torch.set_num_threads(before)


def test_every_target_and_a_substitutes_own_match_the_thread_engine(tmp_path):
    import os

    from converters import pack
    from targets_helpers import labelled_folder
    src, labels = labelled_folder(str(tmp_path / "labelled"))
    store = str(tmp_path / "a.lmdb")
    pack(src, store, labels_csv=labels, progress=False)
    damaged = tmp_path / "damaged"
    shutil.copytree(src, damaged)
    first = sorted(os.path.relpath(os.path.join(d, f), damaged) for d, _, fs in os.walk(damaged) for f in fs)[4]
    (damaged / first).write_bytes(b"\xff\xd8\xff\xe0 not a jpeg any more" * 10)
    for source in (store, str(damaged)):
        kw = dict(batch_size=3, size=48, num_workers=2, device="cpu", decoder="pil", shuffle=True, seed=1,
                  on_error="substitute", train=True)
        out = {}
        for engine in ("threads", "processes"):
            opened = source if source == store else open_dataset(source, labels_csv=labels)   # a folder
            with FeedLoader(opened, engine=engine, **kw) as loader:
                out[engine] = [(x.clone(), {k: v.clone() for k, v in y.items()}) for x, y in loader]
                out[engine + "-ledger"] = [(r.index, r.substitute) for r in loader.stats.bad_records]
        assert len(out["threads"]) == 4 and out["threads-ledger"] == out["processes-ledger"]
        assert (source == store) == (out["threads-ledger"] == [])
        for (xa, ya), (xb, yb) in zip(out["threads"], out["processes"], strict=True):
            assert torch.equal(xa, xb) and ya.keys() == yb.keys() and all(torch.equal(ya[k], yb[k]) for k in ya)


def test_a_size_schedule_remakes_the_ring_and_both_runners_agree(packed_lmdb):
    sizes = {0: 32, 1: 48, 2: 32}
    out = {}
    for engine in ("threads", "processes"):
        with FeedLoader(str(packed_lmdb), batch_size=8, shuffle=True, num_workers=2, device="cpu", seed=3,
                        train=True, engine=engine, size=lambda epoch: sizes[epoch]) as loader:
            out[engine] = []
            for epoch in sizes:
                loader.set_epoch(epoch)
                out[engine] += [(x.clone(), y.clone()) for x, y in loader]
            # the old size's arenas are forgotten: one per ring position
            assert len(loader.source.workers._arenas) == loader.source.memory.ring.slots
    assert [x.shape[-1] for x, _ in out["threads"]][::6] == [32, 48, 32]
    assert same(out["processes"], out["threads"])


class RecordingFeed(Feed):
    """A Feed that also notes which batch each released Slot held."""

    def __init__(self, *args):
        super().__init__(*args)
        self.released = []

    def release(self, slot) -> None:
        self.released.append(slot.plan.number)
        super().release(slot)


def test_a_host_slot_is_released_when_the_batch_after_next_is_asked_for(packed_lmdb):
    store = open_dataset(str(packed_lmdb))
    epoch = epoch_plan(size=(16, 16))
    workers = make_workers(store)
    memory = ring_of(workers, epoch)
    try:
        feed = RecordingFeed(queue_of(workers, epoch), epoch.batches(store.labels, store.sizes), memory.ring)
        stats = LoaderStats()
        for k, (images, labels) in enumerate(deliver(feed, HostFinisher(HOST, None, None, Filled(True, True)), stats)):
            assert feed.released == list(range(max(0, k - 1))), f"batch {k}"
            assert images.shape == (4, 3, 16, 16) and len(labels) == 4
    finally:
        workers.close()
    assert k + 1 == epoch.count(len(store))


def test_a_loader_left_open_does_not_keep_the_process_alive(packed_lmdb):
    """A script that stops after one batch, without close() or the end of the epoch, exits:
    neither worker threads nor worker processes hold the interpreter open."""
    for engine in ("threads", "processes"):
        script = textwrap.dedent(f"""
            import sys
            from feedline import FeedLoader
            loader = FeedLoader({str(packed_lmdb)!r}, batch_size=4, size=32, num_workers=2, device="cpu",
                                decoder="opencv", engine={engine!r})
            it = iter(loader)
            next(it)
            sys.modules["__main__"].keep = (loader, it)   # alive until the interpreter exits
            print("done", flush=True)
        """)
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr[-2000:]
        assert "Traceback" not in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_the_time_of_each_stage_is_a_share_of_the_epoch(packed_lmdb, engine):
    """read_s, decode_s and copy_s are seconds the workers spent in each stage: positive, and
    none more than the epoch's wall time times the number of workers."""
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_workers=2, device="cpu", decoder="opencv",
                        engine=engine)
    started = time.perf_counter()
    assert sum(len(y) for _, y in loader) == 48
    elapsed = time.perf_counter() - started
    s = loader.stats
    for stage in (s.read_s, s.decode_s, s.copy_s):
        assert 0 < stage <= 2 * elapsed
    loader.close()


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_raise_mode_stops_decoding_a_failed_batch_and_says_so_at_once(tmp_path, engine):
    """Records 8 and 10 of the last batch are not JPEGs. One worker: after record 8 fails, the
    rest of that batch is left undecoded (the ledger names record 8 only) and the consumer
    waiting for the batch hears of the failure at once (it runs in a thread here, so a
    consumer left waiting fails the test instead of hanging it)."""
    records = make_records(12, 3)
    for index in (8, 10):
        records.images[index] = b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10
    loader = FeedLoader(write_lmdb(tmp_path / "bad.lmdb", records), batch_size=4, size=16, shuffle=False,
                        num_workers=1, device="cpu", decoder="opencv", engine=engine)
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


@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_a_substitute_in_training_brings_its_own_crop_flip_and_targets(tmp_path, engine):
    """A damaged record of a data set with boxes and keypoints, in training: its row holds the
    rule's substitute, decoded with the substitute's own crop and flip (as the decoder makes
    it, here by hand) and its targets through that crop and flip (targets_helpers' oracle)."""
    from converters import pack
    from feedline.decoders import get_decoder
    from feedline.decoders.base import Box
    from feedline.sources.substitute import substitute_sample
    from targets_helpers import check_row, expected_row, labelled_folder
    src, labels = labelled_folder(str(tmp_path / "labelled"), fields=("label", "boxes", "keypoints"))
    store_path = str(tmp_path / "t.lmdb")
    pack(src, store_path, labels_csv=labels, progress=False)
    bad = 5
    damage_record(store_path, bad)
    with FeedLoader(store_path, batch_size=4, size=40, num_workers=2, device="cpu", decoder="pil", shuffle=True,
                    seed=7, on_error="substitute", train=True, engine=engine, mean=None) as loader:
        store, spec = loader.store, loader.config.augment
        delivered = [(x.clone(), {k: v.clone() for k, v in y.items()}) for x, y in loader]
        [record] = loader.stats.bad_records
    other, box, flip = substitute_sample(spec, 7, 0, bad, 0, store.sizes)
    assert record.index == bad and record.substitute == other
    images, targets = delivered[record.batch]
    want = np.empty((40, 40, 3), np.uint8)
    get_decoder("pil").decode_into(store.read_checked(other), Box(*box), flip, want)
    assert np.array_equal(images[record.position].permute(1, 2, 0).numpy(), want)
    assert targets["label"][record.position] == store.label(other)
    check_row(targets, record.position, expected_row(store, other, spec, 7, 0), max_boxes=targets["boxes"].shape[1])


def damage_record(path: str, index: int) -> None:
    """Flip bytes in the middle of record ``index`` of an LMDB store: a checksum mismatch."""
    import lmdb

    from feedline.dataset.format import image_key
    env = lmdb.open(path, subdir=False, lock=False)
    with env.begin(write=True) as txn:
        value = bytearray(txn.get(image_key(index)))
        value[len(value) // 2:len(value) // 2 + 32] = bytes(32)
        txn.put(image_key(index), bytes(value))
    env.close()
