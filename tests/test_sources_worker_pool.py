"""The worker processes' faults and lifetime: a killed worker is an error naming it and the
record it held, within seconds; a killed consumer leaves no worker and no shared memory
behind; close() joins every worker; abandoned iterators leave nothing behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from feedline import FeedLoader
from feedline.sources.worker_pool import WorkerError


def slow(image, rng):   # holds its record long enough to be killed on it
    time.sleep(2)
    return image


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_killed_worker_is_an_error_naming_it_and_its_record(packed_lmdb):
    loader = FeedLoader(str(packed_lmdb), batch_size=4, shuffle=False, size=32, num_workers=2, device="cpu",
                        train=True, engine="processes", transforms=[slow])
    pool = loader.source.pool
    victim = pool.procs[1].pid   # a batch of 4 goes out in chunks of 1: worker 1 takes record 1 first
    it = iter(loader)
    threading.Timer(1.0, os.kill, (victim, signal.SIGKILL)).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as info:
        next(it)
    assert time.monotonic() - t0 < 5
    message = str(info.value)
    assert f"worker 1 (pid {victim}) killed by SIGKILL while it held record 1 " \
           f"({loader.store.path(1)})" in message and "OOM" in message
    with pytest.raises(WorkerError):   # the loader stays broken, and says so
        next(iter(loader))
    loader.close()
    assert pool.procs == [] and not alive(victim)


def test_a_worker_ended_by_sigterm_says_so(packed_lmdb):
    """``kill PID`` ends a worker as it ends any process (a job being stopped signals them all)."""
    loader = FeedLoader(str(packed_lmdb), batch_size=4, shuffle=False, size=32, num_workers=2, device="cpu",
                        train=True, engine="processes", transforms=[slow])
    victim = loader.source.pool.procs[0].pid
    it = iter(loader)
    threading.Timer(1.0, os.kill, (victim, signal.SIGTERM)).start()
    with pytest.raises(WorkerError, match="killed by SIGTERM") as info:
        next(it)
    assert info.value.signum == signal.SIGTERM
    loader.close()
    assert not alive(victim)


CONSUMER = textwrap.dedent('''
    import sys
    from feedline import FeedLoader
    loader = FeedLoader(sys.argv[1], batch_size=8, size=32, num_workers=2, device="cpu", train=True,
                        engine="processes")
    print(" ".join(str(p.pid) for p in loader.source.pool.procs), flush=True)
    while True:
        for _ in loader:
            pass
''')


def test_a_killed_consumer_leaves_no_worker_and_no_shared_memory(packed_lmdb, tmp_path):
    shm_before = set(os.listdir("/dev/shm"))
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    consumer = subprocess.Popen([sys.executable, str(script), str(packed_lmdb)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in consumer.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        time.sleep(0.5)   # mid-epoch
        for pid in [consumer.pid, *pids]:   # the ring is shared as memfds, never as files in /dev/shm
            maps = Path(f"/proc/{pid}/maps").read_text()
            assert "memfd:feedline" in maps and "/dev/shm/" not in maps
        consumer.send_signal(signal.SIGKILL)
        consumer.wait()
        deadline = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(p) for p in pids)
        left = [name for name in set(os.listdir("/dev/shm")) - shm_before
                if "feedline" in name or str(consumer.pid) in name]
        assert left == []
    finally:   # a consumer that did not end must not outlive the test
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()


def test_ctrl_c_ends_the_consumer_and_its_workers_cleanly(packed_lmdb, tmp_path):
    script = tmp_path / "consumer.py"
    script.write_text(CONSUMER)
    consumer = subprocess.Popen([sys.executable, str(script), str(packed_lmdb)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pids = [int(p) for p in consumer.stdout.readline().split()]
        time.sleep(0.5)
        os.killpg(consumer.pid, signal.SIGINT)   # what Ctrl-C sends: the whole foreground group
        _, err = consumer.communicate(timeout=10)
    finally:   # a consumer that did not end must not outlive the test
        if consumer.poll() is None:
            os.killpg(consumer.pid, signal.SIGKILL)
            consumer.wait()
    # an unhandled KeyboardInterrupt ends Python by SIGINT, as the shell expects
    assert consumer.returncode == -signal.SIGINT and err.rstrip().endswith("KeyboardInterrupt"), err[-600:]
    assert "Traceback" in err and err.count("Traceback") == 1, "the workers print nothing"
    assert not any(Path(f"/proc/{pid}").exists() and alive(pid) for pid in pids)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")   # the ones finalizers swallow
def test_interrupts_anywhere_in_the_loop_leave_a_loader_that_still_works(packed_lmdb):
    """A KeyboardInterrupt can land between any two lines of the consumer's bookkeeping (a
    chunk counted and not sent, an answer read and not counted): the loader neither hangs
    nor loses its place, and the next epoch is the same as an uninterrupted one."""
    import random

    import torch
    options = dict(batch_size=4, shuffle=True, size=32, num_workers=2, device="cpu", train=True, seed=5)
    with FeedLoader(str(packed_lmdb), engine="processes", **options) as loader:
        expected = [(x.clone(), y.clone()) for x, y in loader]

        def interrupt(signum, frame):
            while frame is not None and frame.f_code.co_filename != __file__:
                if "_pytest" in frame.f_code.co_filename:
                    return   # inside pytest's own hooks (reporting a swallowed one): the next alarm
                if frame.f_code.co_filename.endswith(os.path.join("logging", "__init__.py")):
                    return   # logging's at-fork lock release: cut there, logging stays locked for
                             # the rest of the test session (Python's, not the loader's, to guard)
                frame = frame.f_back
            raise KeyboardInterrupt

        draw = random.Random(0)
        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            for _ in range(40):
                # again every 20 ms: one that lands in a finalizer is swallowed there, as Python does
                signal.setitimer(signal.ITIMER_REAL, draw.uniform(0.0005, 0.05), 0.02)
                try:
                    while True:
                        for _ in loader:
                            pass
                except KeyboardInterrupt:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        loader.set_epoch(0)
        got = [(x.clone(), y.clone()) for x, y in loader]
    assert len(got) == len(expected) == 12
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, expected))


def test_close_joins_every_worker(packed_lmdb):
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_workers=3, device="cpu", train=True,
                        engine="processes")
    pids = [p.pid for p in loader.source.pool.procs]
    next(iter(loader))
    loader.close()
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids), "joined: not even a zombie is left"
    loader.close()   # twice is harmless


CHILDREN = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")   # forks happen on the main thread


def test_abandoned_iterators_leave_nothing_behind(packed_lmdb):
    with FeedLoader(str(packed_lmdb), batch_size=4, size=16, num_workers=2, device="cpu", train=True,
                    engine="processes") as loader:
        next(iter(loader))
        threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
        children = set(CHILDREN.read_text().split())
        assert len(children) >= 2
        for _ in range(300):
            it = iter(loader)
            next(it)
            del it
        assert threading.active_count() == threads
        assert len(os.listdir("/proc/self/fd")) <= fds
        assert set(CHILDREN.read_text().split()) == children
        assert sum(len(x) for x, _ in loader) == 48   # and the loader still works


def test_spawned_workers_make_the_same_batches(packed_lmdb, monkeypatch):
    """A process that initialized CUDA spawns its workers: they open the store and build the
    decoder by name where those do not pickle."""
    import torch

    from feedline.sources import worker_pool
    monkeypatch.setattr(worker_pool, "start_method", lambda: "spawn")
    options = dict(batch_size=8, shuffle=True, size=32, num_workers=2, device="cpu", train=True, seed=2)
    with FeedLoader(str(packed_lmdb), engine="threads", **options) as threads:
        expected = [(x.clone(), y.clone()) for x, y in threads]
    with FeedLoader(str(packed_lmdb), engine="processes", **options) as spawned:
        got = [(x.clone(), y.clone()) for x, y in spawned]
    assert len(got) == len(expected) == 6
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(got, expected))
