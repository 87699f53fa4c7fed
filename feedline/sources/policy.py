"""What happens to a bad record, in every engine: one policy, so that a damaged data set
reads the same (the same error, the same substitutes, the same ledger) whichever engine
decodes it.

A record is bad when its bytes cannot be read, fail their checksum, or do not decode.
With ``on_error="raise"`` the consumer gets a DecodeError naming the record's index and
source path; with ``on_error="substitute"`` the sample is replaced by the first of a fixed
sequence of other records (substitute.py: a pure function of seed, epoch and index) that
the engine can deliver. Either way the ledger gets one entry for the sample.
"""
from __future__ import annotations

from typing import Callable, NoReturn, TypeVar

from ..core.choices import OnError
from ..core.errors import ChecksumError, DecodeError, UnavailableError
from ..core.ledger import BadRecord, BadRecordLedger, reason_of
from ..planning.plan import BatchPlan, EpochPlan
from .substitute import first_substitute

T = TypeVar("T")

# An engine's way of delivering a substitute: (record, crop box, flip) -> what it made of it,
# raising when that record fails too.
Attempt = Callable[[int, tuple, bool], T]


def record_error(store, index: int, error: BaseException) -> DecodeError | UnavailableError:
    """The error a bad record raises in the consumer: its index, source path and file, why,
    and what to do. Data that cannot be reached is no record's fault: its own error goes on."""
    if isinstance(error, DecodeError) and error.index == index or isinstance(error, UnavailableError):
        return error
    # A checksum error names the record and says what to do itself: only its facts go on.
    detail = error.detail if isinstance(error, ChecksumError) and error.detail else str(error)
    path = store.path(index)
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


class BadRecords:
    """The rule for bad records, built once per loader: ``on_error`` for ``store``; each run
    (one epoch of one engine) applies it with its own ledger (``policy``)."""

    def __init__(self, store, on_error: OnError):
        self.store, self.on_error = store, OnError.parse(on_error, "on_error")

    @property
    def substitutes(self) -> bool:
        """Whether a bad record is replaced by the rule's first good one (else raised)."""
        return self.on_error is OnError.SUBSTITUTE

    def policy(self, epoch: EpochPlan, ledger: BadRecordLedger) -> "BadRecordPolicy":
        return BadRecordPolicy(self.store, self.on_error, epoch, ledger)


class BadRecordPolicy:
    """The rule for bad records of one run (one epoch of one engine). Thread-safe: it holds
    no state of its own beyond the ledger, which is."""

    def __init__(self, store, on_error: OnError, epoch: EpochPlan, ledger: BadRecordLedger):
        self.store, self.on_error, self.epoch, self.ledger = store, on_error, epoch, ledger

    @property
    def raises(self) -> bool:
        return self.on_error is OnError.RAISE

    def fail(self, plan: BatchPlan, position: int, error: BaseException) -> NoReturn:
        """Sample ``position`` of ``plan`` cannot be delivered: into the ledger, then raised."""
        self.ledger.add(bad_record(self.store, plan, position, error, None))
        raised = record_error(self.store, int(plan.indices[position]), error)
        if raised is error:
            raise error
        raise raised from error

    def substituted(self, plan: BatchPlan, position: int, error: BaseException, substitute: int) -> None:
        """Sample ``position`` of ``plan`` was bad (``error``) and ``substitute`` was delivered."""
        self.ledger.add(bad_record(self.store, plan, position, error, substitute))

    def replace(self, plan: BatchPlan, position: int, error: BaseException, attempt: Attempt) -> T:
        """Sample ``position`` of ``plan`` is bad (``error``): raise it, or return what
        ``attempt`` makes of the first substitute it can deliver (the ledger names that one)."""
        if self.raises or isinstance(error, UnavailableError):
            self.fail(plan, position, error)
        ep, index = self.epoch, int(plan.indices[position])
        found = first_substitute(ep.spec, ep.seed, ep.epoch, index, self.store.sizes, attempt)
        if found is None:
            self.fail(plan, position, error)
        other, _, _, made = found
        self.substituted(plan, position, error, other)
        return made
