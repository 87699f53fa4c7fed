"""background.ahead: a generator on its own thread, in order, errors in order, nothing left running."""
from __future__ import annotations

import threading
import time

import pytest

from feedline.sources.background import ahead


def threads_named(name):
    return [t for t in threading.enumerate() if t.name == name]


def test_items_arrive_in_order_and_the_thread_ends():
    assert list(ahead(iter(range(100)), 3, "t-order")) == list(range(100))
    assert threads_named("t-order") == []


def test_an_error_arrives_after_the_items_before_it():
    def items():
        yield from (1, 2)
        raise KeyError("record 7")
    got = []
    with pytest.raises(KeyError, match="record 7"):
        for item in ahead(items(), 2, "t-error"):
            got.append(item)
    assert got == [1, 2]


def test_closing_early_stops_a_producer_blocked_on_a_full_queue():
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1
    it = ahead(endless(), 2, "t-close")
    assert next(it) == 0
    time.sleep(0.2)            # the producer fills the queue and blocks
    it.close()
    assert threads_named("t-close") == []
    assert len(produced) <= 5  # bounded: depth 2, plus what was in hand
