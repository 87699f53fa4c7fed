"""The bad records a pipeline engine (DALI) has found, kept across epochs: it learns that a
record is bad only after the batch holding it was handed to its pipeline, so it remembers
the record and substitutes it from then on (policy.py decides what happens to it), and a
known bad record never fails a pipeline again."""
from __future__ import annotations

import numpy as np

from ..core.errors import DecodeError
from .policy import BadRecordPolicy


class KnownBad:
    """Records found bad and why; grows only with bad records."""

    def __init__(self, store):
        self.store = store
        self._errors: dict[int, BaseException] = {}
        self._checker = None  # a CPU decoder, built at the first failure

    def __contains__(self, index: int) -> bool:
        return index in self._errors

    def found(self, index: int, error: BaseException, policy: BadRecordPolicy) -> None:
        """Record ``index`` is bad: remembered, to be substituted from now on (unless the
        policy raises, which remembers nothing)."""
        if not policy.raises:
            self._errors.setdefault(index, error)

    def read(self, index: int, policy: BadRecordPolicy) -> np.ndarray:
        """Record ``index``'s bytes as DALI takes them; raises for a record known or found bad."""
        if index in self._errors:  # raised each epoch: without its old traceback, none piles up
            raise self._errors[index].with_traceback(None)
        try:
            # DALI copies the bytes when they are fed, before the store's buffer can change.
            return np.frombuffer(self.store.read_checked(index), dtype=np.uint8)
        except Exception as exc:
            self.found(index, exc, policy)
            raise

    def check(self, index: int) -> BaseException | None:
        """Why record ``index`` does not decode on the CPU to the size the store records, or None."""
        if self._checker is None:
            from ..decoders import get_decoder
            self._checker = get_decoder("auto")
        try:
            h, w = self._checker.decode(self.store.read_checked(index)).shape[:2]
        except Exception as exc:  # any failure of the decoder is this record's problem
            return exc
        expected = self.store.size(index)
        if (h, w) != expected:
            return DecodeError(f"decodes to {h}x{w}, but the store records {expected[0]}x{expected[1]}")
        return None
