"""Reading one record and handling a bad one, the same way in every batch source."""
from __future__ import annotations

from ..errors import DecodeError
from ..ledger import BadRecord, reason_of
from ..plan import BatchPlan


def read_record(store, index: int):
    """The record's encoded bytes, checked against its checksum when the store has them."""
    return store.read_checked(index)


def record_error(store, index: int, error: BaseException) -> DecodeError:
    """The error a bad record raises in the consumer, from any source: its index, source
    path and file, why, and what to do."""
    if isinstance(error, DecodeError) and error.index == index:
        return error
    # A checksum error names the record and says what to do itself: only its facts go on.
    path, detail = store.path(index), getattr(error, "detail", None) or str(error)
    stop = "" if detail.endswith(".") else "."   # a store's message ends with its own full stop
    return DecodeError(f"record {index} ({path}) of {store.filename}: {reason_of(error)}: {detail}{stop} "
                       "Check the file with `feedline verify`, or pass on_error='substitute'.",
                       index=index, path=path)


def bad_record(store, plan: BatchPlan, position: int, error: BaseException,
               substitute: int | None) -> BadRecord:
    """The ledger entry for sample ``position`` of ``plan``."""
    index = int(plan.indices[position])
    return BadRecord(epoch=plan.epoch, batch=plan.number, position=position, index=index,
                     path=store.path(index), reason=reason_of(error), detail=str(error),
                     substitute=substitute)
