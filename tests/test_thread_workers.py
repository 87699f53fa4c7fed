"""sources/thread_workers.py: worker threads are daemons named after their work, stopped and
joined by close(); a loop that ends by an exception is reported as that worker's end, never
a hang (a busy worker's stack: tests/test_sources_workers.py)."""
from __future__ import annotations

import threading

import pytest
from engine_helpers import make_workers

from feedline import open_dataset
from feedline.core.errors import WorkerError


def test_the_threads_are_named_daemons_joined_by_close(packed_lmdb):
    workers = make_workers(open_dataset(str(packed_lmdb)), "threads", count=2)
    workers.start()
    threads = [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]
    assert len(threads) == 2 and all(t.daemon and t.is_alive() for t in threads)
    workers.close()
    assert not any(t.is_alive() for t in threads)


def test_a_loop_that_ends_by_an_exception_is_that_workers_end(packed_lmdb):
    workers = make_workers(open_dataset(str(packed_lmdb)), "threads", count=2)
    workers.start()
    try:
        workers._post(1, ("fill", None))   # not a chunk: the loop itself fails
        with pytest.raises(WorkerError, match="worker thread 1 ended between records: AttributeError"):
            workers.results(10)
        assert not workers.running
        with pytest.raises(WorkerError):   # and the loader cannot go on
            workers.start()
    finally:
        workers.close()
