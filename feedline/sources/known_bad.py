"""The bad records a pipeline source has found, and the shared rule for raising or
substituting them: for sources (DALI, the GPU decoder) that learn a record is bad after
the batch holding it was handed to their pipeline, so that a known bad record never fails
a pipeline again."""
from __future__ import annotations

from ..choices import OnError
from ..errors import DecodeError
from ..plan import BatchPlan, EpochPlan
from ..stats import LoaderStats
from .records import bad_record, read_record, record_error
from .substitute import MAX_ATTEMPTS, substitute_sample


class KnownBad:
    """Records found bad, kept across epochs; grows only with bad records."""

    def __init__(self, store, on_error: OnError):
        self.store, self.on_error = store, on_error
        self._errors: dict[int, BaseException] = {}
        self._checker = None  # a CPU decoder, built at the first failure

    def __contains__(self, index: int) -> bool:
        return index in self._errors

    def found(self, index: int, error: BaseException, plan: BatchPlan, k: int, stats: LoaderStats) -> None:
        """Record ``index`` (sample ``k`` of ``plan``, or its substitute) is bad: raise it
        (on_error='raise') or remember it for substitution."""
        if self.on_error is OnError.RAISE:
            if index == int(plan.indices[k]):
                stats.ledger.add(bad_record(self.store, plan, k, error, None))
            raise record_error(self.store, index, error) from error
        self._errors.setdefault(index, error)

    def substitute(self, epoch: EpochPlan, plan: BatchPlan, k: int, stats: LoaderStats):
        """(index, box, flip) of the first substitute of sample ``k`` not known to be bad."""
        index = int(plan.indices[k])
        error = self._errors[index]
        for attempt in range(MAX_ATTEMPTS):
            sub, box, flip = substitute_sample(epoch.spec, epoch.seed, epoch.epoch, index, attempt,
                                               self.store.sizes)
            if sub not in self._errors:
                stats.ledger.add(bad_record(self.store, plan, k, error, sub))
                return sub, box, flip
        stats.ledger.add(bad_record(self.store, plan, k, error, None))
        raise record_error(self.store, index, error)

    def check(self, index: int) -> BaseException | None:
        """Why record ``index`` does not decode on the CPU to the size the store records, or None."""
        if self._checker is None:
            from ..decoders import get_decoder
            self._checker = get_decoder("auto")
        try:
            h, w = self._checker.decode(read_record(self.store, index)).shape[:2]
        except Exception as exc:  # any failure of the decoder is this record's problem
            return exc
        expected = self.store.size(index)
        if (h, w) != expected:
            return DecodeError(f"decodes to {h}x{w}, but the store records {expected[0]}x{expected[1]}")
        return None
