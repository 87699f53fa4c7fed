"""sources/worker_process.py: what crosses from a worker process to the consumer. An error
that pickles and unpickles as itself arrives as itself, with the worker's traceback as a
note; one that does not (an __init__ that takes other arguments) arrives as a WorkerRaised
naming its type, with its message and the traceback; end to end, the record is named too."""
from __future__ import annotations

import pickle

import pytest

from feedline import FeedLoader
from feedline.core.errors import ChecksumError, WorkerRaised
from feedline.sources.fill import ChunkDone, Failure, Substituted
from feedline.sources.worker_process import crossing, portable_error


class TwoArguments(Exception):
    def __init__(self, what, where):
        super().__init__(f"{what} at {where}")


def raised(error):
    try:
        raise error
    except Exception as exc:
        return exc


def test_an_error_that_unpickles_crosses_as_itself_with_the_workers_traceback():
    error = portable_error(raised(ChecksumError("bytes changed", "a.lmdb", 3, "x.jpg", detail="stored 1")))
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ChecksumError and (back.index, back.path, back.detail) == (3, "x.jpg", "stored 1")
    assert "the worker's traceback" in back.__notes__[0] and "in raised" in back.__notes__[0]


def test_an_error_that_does_not_unpickle_crosses_as_a_stand_in_naming_it():
    error = portable_error(raised(TwoArguments("the user's bug", "row 3")))
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is WorkerRaised and back.type_name.endswith("TwoArguments")
    assert "TwoArguments: the user's bug at row 3" in str(back) and "in raised" in back.__notes__[0]


def test_each_error_of_an_answer_is_made_portable():
    done = ChunkDone(4, substituted=(Substituted(1, raised(TwoArguments("a", "b")), 7, (0, 0, 4, 4), False),),
                     failure=Failure(2, raised(TwoArguments("c", "d")), bad_record=False))
    back = pickle.loads(pickle.dumps(crossing(done)))
    assert [type(s.error) for s in back.substituted] == [WorkerRaised] and back.substituted[0].index == 7
    assert type(back.failure.error) is WorkerRaised and back.failure.row == 2


def raises_two_arguments(image, rng):
    raise TwoArguments("the user's bug", "this sample")


def test_a_users_exception_that_does_not_unpickle_reaches_the_consumer_whole(packed_lmdb):
    with FeedLoader(str(packed_lmdb), batch_size=4, size=16, num_workers=1, device="cpu", engine="processes",
                    shuffle=False, transforms=[raises_two_arguments]) as loader:
        with pytest.raises(WorkerRaised) as info:
            next(iter(loader))
        path = loader.store.path(0)
    notes = "\n".join(info.value.__notes__)
    assert "TwoArguments: the user's bug at this sample" in str(info.value)
    assert "in raises_two_arguments" in notes and f"on record 0 ({path})" in notes
