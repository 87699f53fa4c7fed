"""sources/worker_loop.py: the one loop every worker runs, fed here by hand through a list
inbox: a run's chunks are filled into the arena they name, a chunk of an older run is
answered empty, a sync answers once what came before it is handled, a dropped arena is
forgotten, and the loop ends at stop."""
from __future__ import annotations

import numpy as np
from engine_helpers import epoch_plan

from feedline import open_dataset
from feedline.decoders import get_decoder
from feedline.sources.arena import Arena
from feedline.sources.fill import Chunk, ChunkDone, Control, RunSpec, SampleSpec, Synced
from feedline.sources.rows import RowFormat
from feedline.sources.worker_loop import serve


class ListInbox:
    def __init__(self, messages):
        self.messages, self.answers = list(messages), []

    def receive(self):
        return self.messages.pop(0) if self.messages else None

    def answer(self, answer) -> None:
        self.answers.append(answer)

    def memory(self, message):
        return message[3]


def test_a_run_is_served_until_stop(packed_lmdb):
    store = open_dataset(str(packed_lmdb))
    epoch = epoch_plan(size=(16, 16))
    plan = next(epoch.batches(store.labels, store.sizes))
    fmt = RowFormat(4, (16, 16))
    arenas = [Arena(fmt.nbytes, shared=False) for _ in range(2)]
    control = np.array([2, -1], dtype=np.int64)

    def chunk(ticket, generation, arena):
        return Chunk(ticket, generation, arena, 0, plan.indices, plan.boxes, plan.flips)

    inbox = ListInbox([("arena", 0, fmt, arenas[0].memory), ("arena", 1, fmt, arenas[1].memory),
                       ("run", RunSpec(2, 0, epoch.spec)), ("fill", chunk(1, 1, 0)), ("fill", chunk(2, 2, 1)),
                       ("sync", 9), ("drop", 0), ("stop",), ("fill", chunk(3, 2, 1))])
    serve(inbox, SampleSpec(store, get_decoder("opencv"), None, 0, False), Control(control, 0))
    assert inbox.answers == [ChunkDone(1), inbox.answers[1], Synced(9)]
    assert inbox.answers[1].ticket == 2 and inbox.answers[1].failure is None
    assert not np.frombuffer(arenas[0].memory, np.uint8).any()        # the older run's chunk: skipped
    assert np.frombuffer(arenas[1].memory, np.uint8).any()
    assert inbox.messages == [("fill", chunk(3, 2, 1))]                # nothing after stop
