"""sources/watchdog.py. FeedLoader(timeout=...), DataLoader's keyword, on the worker engine:
a worker stuck on the due batch is a WorkerError naming it, its pid and its record, within
seconds, and leaves no process behind; a slow batch whose workers keep answering is no error;
the other engines refuse the keyword. With any engine and timeout=0, a stall is logged once
with each stuck worker, its record and its Python stack."""
from __future__ import annotations

import os
import sys
import time

import cv2
import numpy as np
import pytest
from storefiles import make_records, write_lmdb

from feedline import FeedLoader
from feedline.core.errors import WorkerError
from feedline.sources import watchdog
from test_process_workers import alive

STUCK = 5   # the record whose transform hangs: the only black image of the store
HUNG = "/nonexistent"   # made by the first call that hangs (each test sets its own): later calls pass
SLEEP_S = 30            # how long it hangs


def hangs_once_on_black(image, rng):   # a user's transform stuck on one record, the first time
    if image.max() < 16:
        try:
            os.close(os.open(HUNG, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return image
        time.sleep(SLEEP_S)
    return image


def slow_everywhere(image, rng):
    time.sleep(0.25)
    return image


@pytest.fixture
def hung(tmp_path, monkeypatch):
    """A fresh HUNG marker: the transform hangs on the black record once in this test."""
    monkeypatch.setattr(sys.modules[__name__], "HUNG", str(tmp_path / "hung"))


@pytest.fixture
def store_with_a_black_record(tmp_path):
    records = make_records(12, 3)
    ok, black = cv2.imencode(".jpg", np.zeros(records.sizes[STUCK], dtype=np.uint8))
    assert ok
    records.images[STUCK] = black.tobytes()
    return write_lmdb(tmp_path / "black.lmdb", records)


def loader(path, **kw) -> FeedLoader:
    return FeedLoader(str(path), **{"batch_size": 4, "shuffle": False, "size": 16, "num_workers": 2,
                                    "device": "cpu", "engine": "processes", "decoder": "opencv", **kw})


def test_a_stuck_worker_is_an_error_naming_its_record_and_is_stopped(store_with_a_black_record, hung):
    with loader(store_with_a_black_record, transforms=[hangs_once_on_black], timeout=1) as feed:
        workers = feed.source.workers
        pids = [p.pid for p in workers.procs]
        it = iter(feed)
        assert next(it)[1].tolist() == [0, 1, 2, 0]   # records 0..3: no stuck one
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            next(it)               # records 4..7: record 5 sleeps 30 s
        waited = time.monotonic() - t0
        assert waited < 20, f"the watchdog let the consumer wait {waited:.0f} s (the transform sleeps 30 s)"
        message = str(info.value)
        path = feed.store.path(STUCK)
        assert f"sent no answer within timeout=1 s while it held record {STUCK} ({path}) of " in message
        k = int(message.split("feedline worker process ")[1].split(" ")[0])
        assert f"worker process {k} (pid {pids[k]})" in message and "the next iteration starts new ones" in message
        assert workers.procs == [] and not any(alive(p) for p in pids), "every worker stopped, none left"
        # The next iteration starts new workers and delivers the whole epoch (record 5 no longer hangs).
        assert [labels.tolist() for _, labels in feed] == [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2]]
        renewed = [p.pid for p in workers.procs]
        assert len(renewed) == 2 and not set(renewed) & set(pids)
    assert not any(alive(p) for p in renewed)


def test_an_abandoned_run_waits_no_longer_than_the_timeout_for_a_stuck_worker(store_with_a_black_record, hung):
    """Closing an iteration waits for the workers to finish the sample they are on: with a
    timeout, a stuck one is stopped after it instead of after 30 s."""
    with loader(store_with_a_black_record, transforms=[hangs_once_on_black], timeout=1) as feed:
        pids = [p.pid for p in feed.source.workers.procs]
        it = iter(feed)
        next(it)
        deadline = time.monotonic() + 20
        while not os.path.exists(HUNG) and time.monotonic() < deadline:   # a worker is in the sleep
            time.sleep(0.05)
        assert os.path.exists(HUNG)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="did not finish their sample within 1 s of the run's end"):
            it.close()
        assert time.monotonic() - t0 < 20
        assert not any(alive(p) for p in pids)
        assert len([labels for _, labels in feed]) == 3   # new workers, the whole epoch


def test_a_slow_batch_whose_workers_keep_answering_is_no_error(packed_lmdb):
    """One worker, 12 records a batch at 0.25 s each: the batch takes about 3 s, past the
    2 s timeout, but each chunk of 3 records answers within it; the clock restarts with
    each answer, as DataLoader's does with each batch."""
    with loader(packed_lmdb, transforms=[slow_everywhere], timeout=2.0, num_workers=1, batch_size=12) as feed:
        it = iter(feed)
        assert len(next(it)[1]) == 12 and len(next(it)[1]) == 12


def test_timeout_is_checked_and_refused_by_the_engines_that_cannot_stop_their_work(packed_lmdb):
    assert loader(packed_lmdb).config.timeout == 0   # DataLoader's default: wait forever
    with pytest.raises(ValueError, match=r"timeout=1 needs engine='processes'.*engine='threads' works on "
                                         r"threads of this process"):
        loader(packed_lmdb, engine="threads", timeout=1)
    assert loader(packed_lmdb, engine="threads", timeout=0).config.timeout == 0
    for bad in (-1, True, "5", float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout must be a number of seconds >= 0"):
            loader(packed_lmdb, timeout=bad)


@pytest.mark.parametrize("engine", ["processes", "threads"])
def test_a_stall_is_logged_once_with_the_workers_record_and_stack(store_with_a_black_record, hung, engine,
                                                                 monkeypatch, caplog):
    """timeout=0 waits forever, as DataLoader's does, but not silently: past STALL_S without an
    answer for the due batch, one warning names each worker holding it, its record and where
    its Python code is (here shortened to 1 s; the transform sleeps 30 s once)."""
    monkeypatch.setattr(watchdog, "STALL_S", 1.0)
    monkeypatch.setattr(sys.modules[__name__], "SLEEP_S", 4)
    with loader(store_with_a_black_record, transforms=[hangs_once_on_black], engine=engine, num_workers=1) as feed:
        with caplog.at_level("WARNING", logger=watchdog.__name__):
            labels = [y.tolist() for _, y in feed]
    assert labels == [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2]]   # it went on once the sample finished
    [report] = [r.getMessage() for r in caplog.records if "no answer for the due batch" in r.getMessage()]
    kind = "process" if engine == "processes" else "thread"
    assert f"worker {kind} 0" in report and f"while it held record {STUCK} ({feed.store.path(STUCK)})" in report
    assert "in hangs_once_on_black" in report and "in fill_chunk" in report
