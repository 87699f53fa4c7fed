"""bench/scaling.py's reading of py-spy's output and of a process's memory."""
from __future__ import annotations

import os

from bench.scaling import descendants, memory_mib, parse_raw, pid_of


def test_a_workers_samples_are_its_own_not_its_parents(tmp_path):
    raw = tmp_path / "gil.raw"
    raw.write_text('process 10:"python run.py";thread (0x1);main (run.py:3) 5\n'
                   'process 10:"python run.py";process 11:"python run.py";thread (0x2);serve (w.py:9) 7\n'
                   'process 10:"python run.py";process 11:"python run.py";thread (0x2);fill (w.py:20) 1\n'
                   'process 10:"python run.py";process 12:"python run.py";thread (0x3);serve (w.py:9) 2\n')
    per_proc, per_thread = parse_raw(raw)
    assert {pid_of(p): n for p, n in per_proc.items()} == {10: 5, 11: 8, 12: 2}
    assert sum(per_thread.values()) == 15


def test_memory_and_children_of_this_process():
    mine = memory_mib(os.getpid())
    assert mine["rss_mib"] > 10 and 0 < mine["pss_own_mib"] <= mine["pss_mib"] <= mine["rss_mib"] + 1
    assert memory_mib(2 ** 22 + 7) == {}   # no such process
    assert os.getpid() not in descendants(os.getpid())


def test_the_consumers_gil_samples_are_placed(tmp_path):
    from bench.scaling import consumer_frames
    raw = tmp_path / "gil.raw"
    raw.write_text('process 10:"py";thread (0x1);run (feedline/sources/processes.py:3);send (connection.py:9) 3\n'
                   'process 10:"py";process 11:"py";thread (0x2);fill (feedline/sources/worker_process.py:9) 7\n'
                   'process 10:"py";thread (0x1);main (run.py:1) 1\n')
    assert consumer_frames(raw, 10) == [[0.75, "run (feedline/sources/processes.py:3)  <- send (connection.py:9)"],
                                        [0.25, "-  <- main (run.py:1)"]]
