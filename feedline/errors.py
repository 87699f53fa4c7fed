"""The exceptions feedline raises. Messages name the file, the record and what to do."""


class FeedlineError(Exception):
    """Base class of every error feedline raises on purpose."""


class StoreError(FeedlineError):
    """A data file that cannot be opened or read as a feedline store."""


class PackError(FeedlineError):
    """Packing could not finish: bad input under --on-error fail, a full disk, a clash with OUT."""


class DecodeError(FeedlineError):
    """A record that could not be decoded. Carries the record's index and source path."""

    def __init__(self, message: str, index: int | None = None, path: str | None = None):
        super().__init__(message)
        self.index = index
        self.path = path


class BackendUnavailable(FeedlineError):
    """An optional library (a decoder backend, DALI, CUDA) is not installed or usable."""
