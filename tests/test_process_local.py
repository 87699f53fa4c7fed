"""State of one process: made once per process, lazily; a forked child makes its own and
never closes, releases or frees what it inherited (not even when the holder is dropped there,
nor when the child's interpreter exits); the lock of a process is never a parent's."""
from __future__ import annotations

import ast
import gc
import os
import pickle
import subprocess
import sys
import threading

import pytest
from process_helpers import in_child

from feedline.stores.process_local import ProcessLocal, process_lock


class Made:
    """A value that says which process made it and which process released it."""

    def __init__(self, log: list):
        self.pid, self.log = os.getpid(), log

    def release(self) -> None:
        self.log.append(("released", self.pid, os.getpid()))


def test_one_value_per_process_made_once_even_by_threads_at_once():
    made = []

    def make():
        made.append(1)
        return object()

    holder = ProcessLocal(make)
    seen = []
    start = threading.Barrier(8)

    def get():
        start.wait()
        seen.append(holder.get())

    threads = [threading.Thread(target=get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len({id(v) for v in seen}) == 1 and holder.peek() is seen[0]


def test_take_hands_over_this_processs_value_and_the_next_get_makes_another():
    holder = ProcessLocal(object)
    assert holder.peek() is None and holder.take() is None   # nothing made yet: nothing made by asking
    first = holder.get()
    assert holder.take() is first and holder.peek() is None
    assert holder.get() is not first


def test_a_forked_child_makes_its_own_and_leaves_the_inherited_one_alone():
    log: list = []
    holder = ProcessLocal(lambda: Made(log), Made.release)
    parent = holder.get()

    def work() -> bytes:
        assert holder.take() is None                 # the parent's: not the child's to hand over
        assert holder.inherited() == [parent]
        own = holder.get()
        assert own is not parent and own.pid == os.getpid()
        assert holder.take() is own and holder.inherited() == [parent]
        return b"ok"

    assert in_child(work) == (0, b"ok")
    assert holder.inherited() == [] and holder.get() is parent


def test_a_holder_dropped_releases_its_value_in_the_maker_only():
    log: list = []
    holder = ProcessLocal(lambda: Made(log), Made.release)
    holder.get()

    def work() -> bytes:
        nonlocal holder
        holder.get()        # the child's own
        holder = None       # dropped in the child: releases the child's value, not the parent's
        gc.collect()
        ProcessLocal(object).get()   # a safe point
        return repr(log).encode()

    code, out = in_child(work)
    child_log = ast.literal_eval(out.decode())
    assert code == 0 and len(child_log) == 1 and child_log[0][1] == child_log[0][2] != os.getpid()
    assert log == []
    pid = holder.get().pid
    holder = None
    gc.collect()
    ProcessLocal(object).get()   # a safe point: the collected holder's value is released there
    assert log == [("released", pid, os.getpid())]


def test_a_holder_collected_while_its_release_lock_is_held_is_released_later_not_deadlocked():
    """The collector may run inside any allocation, while this very thread holds the lock that
    the release takes (a store's registry lock, say): the release waits for a safe point."""
    lock, log = threading.Lock(), []

    def release(value) -> None:
        if not lock.acquire(timeout=1):   # what would have been a deadlock
            log.append("released while its lock was held by the releasing thread")
            return
        log.append("released")
        lock.release()

    holder = ProcessLocal(object, release)
    holder.get()
    with lock:
        holder = None
        gc.collect()
    assert log == []
    ProcessLocal(object).get()
    assert log == ["released"]


EXITS_NORMALLY = """
import os, sys
from feedline.stores.process_local import ProcessLocal

FD = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)

class Loud:
    def __del__(self, write=os.write, fd=FD, getpid=os.getpid):   # kept: the module may be emptied first
        write(fd, b"%d\\n" % getpid())

holder = ProcessLocal(Loud)
holder.get()
pid = os.fork()
if pid == 0:
    holder = None   # and the child's interpreter exits normally, emptying every module
    sys.exit(0)
os.waitpid(pid, 0)
print(pid)
"""


def test_a_forked_child_exiting_normally_frees_nothing_it_inherited(tmp_path):
    marks = tmp_path / "freed"
    done = subprocess.run([sys.executable, "-c", EXITS_NORMALLY, str(marks)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    child = done.stdout.strip()
    freed = marks.read_text().split() if marks.exists() else []
    assert child not in freed


def test_a_forked_childs_process_lock_is_its_own_even_when_the_parent_held_one():
    lock = process_lock()
    assert process_lock() is lock
    with lock:   # held by this thread at the fork

        def work() -> bytes:
            mine = process_lock()
            return b"ok" if mine is not lock and mine.acquire(timeout=1) else b"inherited lock"

        assert in_child(work) == (0, b"ok")


def test_state_of_one_process_does_not_pickle():
    with pytest.raises(TypeError, match="open the store there by its file name"):
        pickle.dumps(ProcessLocal(object))
