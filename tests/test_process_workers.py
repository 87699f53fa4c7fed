"""sources/process_workers.py: the worker processes' faults and lifetime. A killed worker is
an error naming it and the record it held, within seconds; a killed consumer leaves no
worker (busy, queued or stopped) and no shared memory behind; a forked worker keeps no copy
of the consumer's sockets; close() joins every worker, and acts only in the process that
started them; abandoned iterators leave nothing behind; a worker's stack can be read."""
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
from feedline.core.errors import WorkerError


# A shuffled training loader of 12 batches, for the tests that compare an epoch after a fault.
SHUFFLED = dict(batch_size=4, shuffle=True, size=32, num_workers=2, device="cpu", train=True, seed=5,
                engine="processes")


def batches(loader) -> list:
    """One epoch of ``loader``, each batch copied out of the ring."""
    return [(x.clone(), y.clone()) for x, y in loader]


def same_batches(got: list, expected: list) -> bool:
    import torch
    return len(got) == len(expected) and all(torch.equal(a, c) and torch.equal(b, d)
                                             for (a, b), (c, d) in zip(got, expected))


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
    workers = loader.source.workers
    victim = workers.procs[1].pid   # a batch of 4 goes out in chunks of 1: worker 1 takes record 1 first
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
    assert workers.procs == [] and not alive(victim)


def test_a_worker_ended_by_sigterm_says_so(packed_lmdb):
    """``kill PID`` ends a worker as it ends any process (a job being stopped signals them all)."""
    loader = FeedLoader(str(packed_lmdb), batch_size=4, shuffle=False, size=32, num_workers=2, device="cpu",
                        train=True, engine="processes", transforms=[slow])
    victim = loader.source.workers.procs[0].pid
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
    print(" ".join(str(p.pid) for p in loader.source.workers.procs), flush=True)
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

    with FeedLoader(str(packed_lmdb), **SHUFFLED) as loader:
        expected = batches(loader)

        def epochs_until_interrupted():
            try:
                while True:
                    for _ in loader:
                        pass
            except KeyboardInterrupt:
                pass
        caught_at = epochs_until_interrupted.__code__.co_firstlineno + 5   # the line of its except

        def interrupt(signum, frame):
            """Raise only inside the loop of epochs_until_interrupted(): one landing in its except
            clause or in this test's own lines would end the test, not the loop."""
            while frame is not None and frame.f_code is not epochs_until_interrupted.__code__:
                if "_pytest" in frame.f_code.co_filename:
                    return   # inside pytest's own hooks (reporting a swallowed one): the next alarm
                if frame.f_code.co_filename.endswith(os.path.join("logging", "__init__.py")):
                    return   # logging's at-fork lock release: cut there, logging stays locked for
                             # the rest of the test session (Python's, not the loader's, to guard)
                frame = frame.f_back
            if frame is not None and frame.f_lineno < caught_at:
                raise KeyboardInterrupt

        draw = random.Random(0)
        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            for _ in range(40):
                # again every 20 ms: one that lands in a finalizer is swallowed there, as Python does
                signal.setitimer(signal.ITIMER_REAL, draw.uniform(0.0005, 0.05), 0.02)
                epochs_until_interrupted()
                signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        loader.set_epoch(0)
        got = batches(loader)
    assert len(got) == len(expected) == 12
    assert same_batches(got, expected)


@pytest.mark.parametrize("cut", ["give_arena", "drop_arena"])
def test_a_ctrl_c_while_a_held_batchs_slot_is_made_anew_leaves_the_next_epoch_whole(packed_lmdb, monkeypatch, cut):
    """A batch the consumer keeps has its Slot made anew in a new arena; a Ctrl-C right after
    the workers were given the new arena (or forgot the old one), before the Slot took its
    place, must leave the ring's Slots and the arenas the workers write into the same."""
    from feedline.sources.workers import Workers
    with FeedLoader(str(packed_lmdb), **SHUFFLED) as loader:
        expected = batches(loader)
        original = getattr(Workers, cut)

        def then_interrupt(self, *args):
            original(self, *args)
            monkeypatch.setattr(Workers, cut, original)
            raise KeyboardInterrupt

        monkeypatch.setattr(Workers, cut, then_interrupt)
        kept = []
        with pytest.raises(KeyboardInterrupt):
            for x, _ in loader:
                kept.append(x)
        del kept, x
        loader.set_epoch(0)
        got = batches(loader)
        assert loader.source.workers.arena_numbers() == {s.arena for s in loader.source.memory.ring.made()}
    assert len(got) == len(expected) == 12
    assert same_batches(got, expected)


def test_a_ctrl_c_before_the_workers_keeper_started_leaves_nothing_to_wait_for(packed_lmdb, monkeypatch):
    """Workers started anew (after a run cut short) are started from a keeper thread; a Ctrl-C
    between the keeper's making and its start() must not leave the next start waiting for it."""
    from feedline.sources.process_workers import _Keeper
    with FeedLoader(str(packed_lmdb), **SHUFFLED) as loader:
        expected = batches(loader)
        loader.source.workers.end_run(whole=False)   # as after a run cut short: the next run starts new ones
        original = _Keeper.start

        def interrupted(self):
            monkeypatch.setattr(_Keeper, "start", original)
            raise KeyboardInterrupt

        monkeypatch.setattr(_Keeper, "start", interrupted)
        loader.set_epoch(0)
        with pytest.raises(KeyboardInterrupt):
            next(iter(loader))
        loader.set_epoch(0)
        got = batches(loader)
        assert len(loader.source.workers.procs) == 2
    assert same_batches(got, expected)


def test_a_ctrl_c_inside_a_workers_close_is_finished_by_the_next_stop(packed_lmdb, monkeypatch):
    """Process.close() forgets the process (no pid) before it marks itself closed; a Ctrl-C
    between the two leaves a process that can neither be joined nor closed again."""
    import multiprocessing.process

    children = multiprocessing.process._children

    class CutOnce(set):   # the set of children, whose discard() comes between the two in close()
        def discard(self, item):
            children.discard(item)
            if sys._getframe(1).f_code.co_name == "close":
                monkeypatch.setattr(multiprocessing.process, "_children", children)
                raise KeyboardInterrupt

    with FeedLoader(str(packed_lmdb), **SHUFFLED) as loader:
        expected = batches(loader)
        monkeypatch.setattr(multiprocessing.process, "_children", CutOnce(children))
        with pytest.raises(KeyboardInterrupt):
            loader.source.workers.end_run(whole=False)   # a run cut short: its workers are stopped
        loader.set_epoch(0)
        got = batches(loader)
    assert same_batches(got, expected)


def test_close_joins_every_worker(packed_lmdb):
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_workers=3, device="cpu", train=True,
                        engine="processes")
    pids = [p.pid for p in loader.source.workers.procs]
    next(iter(loader))
    loader.close()
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids), "joined: not even a zombie is left"
    loader.close()   # twice is harmless


def children() -> set[str]:
    """This process's child processes (the workers are forked from a thread of their own)."""
    return {pid for task in Path("/proc/self/task").iterdir() for pid in (task / "children").read_text().split()}


def test_abandoned_iterators_leave_nothing_behind(packed_lmdb):
    with FeedLoader(str(packed_lmdb), batch_size=4, size=16, num_workers=2, device="cpu", train=True,
                    engine="processes") as loader:
        next(iter(loader))
        threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
        before = children()
        assert len(before) >= 2
        for _ in range(300):
            it = iter(loader)
            next(it)
            del it
        assert threading.active_count() == threads
        assert len(os.listdir("/proc/self/fd")) <= fds
        assert children() == before
        assert sum(len(x) for x, _ in loader) == 48   # and the loader still works


def test_spawned_workers_make_the_same_batches(packed_lmdb, monkeypatch):
    """A process that initialized CUDA spawns its workers: they open the store and build the
    decoder by name where those do not pickle."""
    from feedline.sources import process_workers
    monkeypatch.setattr(process_workers, "start_method", lambda: "spawn")
    options = dict(batch_size=8, shuffle=True, size=32, num_workers=2, device="cpu", train=True, seed=2)
    with FeedLoader(str(packed_lmdb), engine="threads", **options) as threads:
        expected = batches(threads)
    with FeedLoader(str(packed_lmdb), engine="processes", **options) as spawned:
        got = batches(spawned)
    assert len(got) == len(expected) == 6
    assert same_batches(got, expected)


BUSY = textwrap.dedent('''
    import sys, time
    from feedline import FeedLoader

    def long(image, rng):   # every sample takes 20 s: the workers are busy, with chunks queued behind
        time.sleep(20)
        return image

    loader = FeedLoader(sys.argv[1], batch_size=8, size=32, num_workers=2, device="cpu", train=True,
                        engine="processes", transforms=[long])
    print(" ".join(str(p.pid) for p in loader.source.workers.procs), flush=True)
    for _ in loader:
        pass
''')


@pytest.mark.parametrize("stop_one", [False, True])
def test_workers_end_within_2_s_of_a_killed_consumer_whatever_they_do(packed_lmdb, tmp_path, stop_one):
    """Busy in a long transform, with work queued behind it, or stopped (SIGSTOP): every worker
    is gone within 2 s of the consumer's SIGKILL (the kernel's PR_SET_PDEATHSIG)."""
    script = tmp_path / "consumer.py"
    script.write_text(BUSY)
    consumer = subprocess.Popen([sys.executable, str(script), str(packed_lmdb)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in consumer.stdout.readline().split()]
        time.sleep(1.0)   # every worker inside its first 20 s sample
        if stop_one:
            os.kill(pids[0], signal.SIGSTOP)
        consumer.kill()
        consumer.wait()
        deadline = time.monotonic() + 2
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in pids if alive(p)]
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert left == []


def socket_inodes(pid: int) -> set[str]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def test_a_forked_worker_keeps_no_copy_of_the_consumers_sockets(packed_lmdb):
    """Each worker closes the consumer's ends it inherited (its own included), so a consumer
    that goes closes every worker's connection."""
    with FeedLoader(str(packed_lmdb), batch_size=4, size=16, num_workers=2, device="cpu", engine="processes") as loader:
        workers = loader.source.workers
        workers.sync(30)   # every worker is past its start
        consumer_ends = {os.readlink(f"/proc/self/fd/{c.fileno()}") for c in workers.conns}
        assert len(consumer_ends) == 2
        for proc in workers.procs:
            assert not socket_inodes(proc.pid) & consumer_ends


GC_IN_A_LATER_WORKER = textwrap.dedent('''
    import gc, os, sys
    from feedline import FeedLoader

    collected = []

    def collect(image, rng):   # the user's transform: a collection inside the later loader's worker
        if not collected:
            collected.append(gc.collect())
        return image

    gc.disable()
    first = FeedLoader(sys.argv[1], batch_size=4, size=16, num_workers=2, device="cpu", engine="processes")
    next(iter(first))
    first.cycle = first   # left to the collector, not closed
    pids = [p.pid for p in first.source.workers.procs]
    control = first.source.workers.control
    generation = int(control[0])
    del first
    second = FeedLoader(sys.argv[1], batch_size=4, size=16, num_workers=2, device="cpu", engine="processes",
                        transforms=[collect])
    sum(len(y) for _, y in second)
    alive = all(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX" for p in pids)
    print("alive" if alive else "stopped", int(control[0]) == generation, flush=True)
    second.close()
    gc.collect()   # here, where its workers were started: they stop
    print("gone" if not any(os.path.exists(f"/proc/{p}") for p in pids) else "left", flush=True)
''')


def test_a_loader_left_to_the_collector_is_not_closed_from_another_loaders_worker(packed_lmdb, tmp_path):
    """A loader collected inside a worker forked later (for another loader) leaves its workers
    and its shared counter alone there, and prints nothing; collected where it started them,
    it stops them."""
    script = tmp_path / "two_loaders.py"
    script.write_text(GC_IN_A_LATER_WORKER)
    result = subprocess.run([sys.executable, str(script), str(packed_lmdb)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["alive", "True", "gone"]
    assert "Traceback" not in result.stderr and "can only join a child process" not in result.stderr
