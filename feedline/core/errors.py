"""The exceptions feedline raises. Messages name the file, the record and what to do."""


class FeedlineError(Exception):
    """Base class of every error feedline raises on purpose."""

    def __reduce__(self):   # its fields too (index, path, detail), across a worker process's pipe
        return type(self), self.args, self.__dict__


class StoreError(FeedlineError):
    """A data file that cannot be opened or read as a feedline store."""


class UnavailableError(StoreError):
    """The data cannot be reached (a server that does not answer, access refused, a shard
    that arrives damaged twice, a full cache disk): no one record is to blame, so the
    bad-record policy never substitutes it away."""


class ChecksumError(StoreError):
    """A record whose bytes do not match the checksum stored when it was packed: the
    file changed on disk (bad sector, bit rot, a partial copy). Carries the file, the
    record's index and its source path."""

    def __init__(self, message: str, filename: str, index: int, path: str, detail: str | None = None):
        super().__init__(message)
        self.filename = filename
        self.index = index
        self.path = path
        self.detail = detail    # what was stored and what was read, for a message that names the record itself

    def __reduce__(self):  # picklable with its fields, e.g. across a process pool
        return type(self), (str(self), self.filename, self.index, self.path, self.detail), self.__dict__


class PackError(FeedlineError):
    """Packing could not finish: bad input under --on-error fail, a full disk, a clash with OUT."""


class DiskFullError(PackError):
    """The output's filesystem has no room: before writing (the estimate) or while writing.
    What was committed is kept for ``--resume``."""


class DecodeError(FeedlineError):
    """A record that could not be decoded. Carries the record's index and source path."""

    def __init__(self, message: str, index: int | None = None, path: str | None = None):
        super().__init__(message)
        self.index = index
        self.path = path


class BackendUnavailable(FeedlineError):
    """An optional library (a decoder backend, DALI, CUDA) is not installed or usable."""


class WorkerError(FeedlineError):
    """A worker died, or went past the loader's ``timeout``: its number, pid, how it ended
    and the record it held; ``signum``, the signal that ended it (None otherwise)."""

    def __init__(self, message: str, signum: int | None = None):
        super().__init__(message)
        self.signum = signum


class WorkerRaised(FeedlineError):
    """An exception raised in a worker process whose type cannot be rebuilt here (its
    ``__init__`` takes other arguments than it pickles, say): ``type_name`` names that type,
    the message is its own, and a note carries the worker's traceback."""

    def __init__(self, message: str, type_name: str = ""):
        super().__init__(message)
        self.type_name = type_name
