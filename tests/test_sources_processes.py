"""The worker-process engine: the same batches as the thread engine for any number of
workers, after a mid-epoch resume, with transforms and with bad records."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from feedline import FeedLoader, TransformSpec, open_dataset
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
        pids = [p.pid for p in loader.source.pool.procs]
        for epoch in range(3):
            loader.set_epoch(epoch)
            assert sum(len(x) for x, _ in loader) == 48
            assert [p.pid for p in loader.source.pool.procs] == pids and all(p.is_alive() for p in
                                                                           loader.source.pool.procs)


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


def test_a_size_schedule_remakes_the_shared_ring_and_matches_threads(packed_lmdb):
    sizes = {0: 32, 1: 48, 2: 32}
    out = {}
    for engine in ("threads", "processes"):
        with FeedLoader(str(packed_lmdb), batch_size=8, shuffle=True, num_workers=2, device="cpu", seed=3,
                        train=True, engine=engine, size=lambda epoch: sizes[epoch]) as loader:
            out[engine] = []
            for epoch in sizes:
                loader.set_epoch(epoch)
                out[engine] += [(x.clone(), y.clone()) for x, y in loader]
            if engine == "processes":   # the old size's arenas are forgotten: one per ring position
                assert len(loader.source.shared.arena_of) == loader.source.shared.ring.slots
    assert [x.shape[-1] for x, _ in out["threads"]][::6] == [32, 48, 32]
    assert same(out["processes"], out["threads"])
