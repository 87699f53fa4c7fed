"""Forks taken while threads read one store, run in a small process of its own (a fork of
pytest's large one costs ten times more): ``python tests/fork_storm.py SOURCE FORKS``
prints {"forked", "hung", "wrong", "failed"} as JSON.

Three threads read SOURCE without pause and a fourth opens and closes it again, so each
fork lands at a random point of their reads (inside one, between two, opening the file).
Each child reads every record, checks it against what the parent read before any fork,
closes the store and exits (code 3: wrong bytes); every tenth also collects garbage. A
child not gone within BOUND_S is killed and counted as hung; forking stops after three.
A remote SOURCE (s3://) is told before the forks (``store.before_fork()``)."""
from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
import threading
import time

BOUND_S = 10.0
IN_FLIGHT = 4
GIVE_UP_AFTER = 3


def storm(open_store, forks: int) -> dict:
    sys.setswitchinterval(1e-4)   # the forking thread waits less for the readers to hand it the GIL
    store = open_store()
    expected = [bytes(store.read(i)) for i in range(len(store))]
    stop = threading.Event()
    problems: list[str] = []

    def read_on() -> None:
        try:
            while not stop.is_set():
                for i in range(len(expected)):
                    if bytes(store.read(i)) != expected[i]:
                        problems.append(f"the parent read wrong bytes for record {i}")
        except Exception as exc:   # noqa: BLE001 - reported in the result
            problems.append(f"{type(exc).__name__}: {exc}")

    def reopen_on() -> None:
        while not stop.is_set():
            other = open_store()
            other.read(0)
            other.close()

    threads = [threading.Thread(target=read_on) for _ in range(3)] + [threading.Thread(target=reopen_on)]
    for t in threads:
        t.start()
    if hasattr(store, "before_fork"):
        store.before_fork()
    counts = {"forked": 0, "hung": 0, "wrong": 0, "failed": 0}
    running: dict[int, tuple[int, float]] = {}   # pidfd -> (pid, when forked)
    try:
        while (counts["forked"] < forks and counts["hung"] < GIVE_UP_AFTER) or running:
            while len(running) < IN_FLIGHT and counts["forked"] < forks and counts["hung"] < GIVE_UP_AFTER:
                pid = os.fork()
                if pid == 0:   # the child: never returns
                    code = 1
                    try:
                        code = 0 if all(bytes(store.read(i)) == b for i, b in enumerate(expected)) else 3
                        store.close()
                        if counts["forked"] % 10 == 0:
                            gc.collect()
                    finally:
                        os._exit(code)
                running[os.pidfd_open(pid)] = (pid, time.monotonic())
                counts["forked"] += 1
            ready, _, _ = select.select(list(running), [], [], 0.1)
            for fd in list(running):
                pid, started = running[fd]
                if fd in ready:
                    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
                    counts["wrong" if code == 3 else "failed"] += code != 0
                elif time.monotonic() - started > BOUND_S:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    counts["hung"] += 1
                else:
                    continue
                os.close(fd)
                del running[fd]
    finally:
        stop.set()
        for t in threads:
            t.join()
        store.close()
    counts["problems"] = problems
    return counts


if __name__ == "__main__":
    from feedline.stores import open_dataset
    source, forks = sys.argv[1], int(sys.argv[2])
    print(json.dumps(storm(lambda: open_dataset(source), forks)))
