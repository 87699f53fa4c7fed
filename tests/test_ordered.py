"""converters.ordered: input order, bounded work in flight, errors reach the consumer."""
from __future__ import annotations

import threading
import time

import pytest

from converters.ordered import OrderedPool


class Slow:
    def __init__(self, value: int):
        self.value = value


def first(i: int):
    return Slow(i) if i % 3 == 0 else i


def second(job: Slow) -> int:
    time.sleep(0.002 * (job.value % 5))  # finish out of order
    return job.value


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_results_in_input_order(jobs):
    with OrderedPool(jobs, window=8) as pool:
        assert list(pool.map(range(60), first, second, Slow)) == list(range(60))


def test_second_step_runs_on_the_pool_first_on_the_caller():
    where = {"first": set(), "second": set()}

    def f(i):
        where["first"].add(threading.current_thread().name)
        return Slow(i)

    def s(job):
        where["second"].add(threading.current_thread().name)
        return job.value

    with OrderedPool(2) as pool:
        list(pool.map(range(10), f, s, Slow))
    assert where["first"] == {threading.current_thread().name}
    assert all(name.startswith("feedline-pack") for name in where["second"])


def test_in_flight_is_bounded():
    started = []

    def f(i):
        started.append(i)
        return Slow(i)

    gate = threading.Event()

    def s(job):
        gate.wait(5)
        return job.value

    with OrderedPool(2, window=5) as pool:
        results = pool.map(range(100), f, s, Slow)
        threading.Timer(0.2, gate.set).start()
        assert next(results) == 0
        # The head blocked until the gate opened: by then at most `window` items had started.
        assert len(started) <= 6
        assert list(results) == list(range(1, 100))


def test_errors_of_the_second_step_reach_the_consumer():
    def s(job):
        if job.value == 6:
            raise ValueError("bad six")
        return job.value

    with OrderedPool(2) as pool:
        got = []
        with pytest.raises(ValueError, match="bad six"):
            for value in pool.map(range(20), first, s, Slow):
                got.append(value)
    assert got == [0, 1, 2, 3, 4, 5]
