"""An output the system will not let us write (read-only filesystem, permission denied, a
parent that is a file) as one line, like every other error the user can fix.

The commands that write (`pack`, `sample`, `train --out`) run inside ``writing_to(out)``:
an OSError about a path at, under or above ``out`` (the output's own folders, its
.partial, journal and error-report side files) becomes a FeedlineError saying what
failed, where, and what to do. Errors about other paths (an input file) pass unchanged.
"""
from __future__ import annotations

import contextlib
import errno
import os

from ..core.errors import FeedlineError

# The errors a user fixes by choosing another place or changing permissions.
UNWRITABLE = {errno.EROFS: "the filesystem is read-only", errno.EACCES: "permission denied",
              errno.EPERM: "permission denied", errno.ENOTDIR: "a file where a folder should be",
              errno.EEXIST: "a file where a folder should be"}


@contextlib.contextmanager
def writing_to(out: str | os.PathLike | None, flag: str = "OUT"):
    """Run the body, turning an unwritable-output OSError about ``out`` into one line that
    names ``flag`` (how the command line calls the output)."""
    try:
        yield
    except OSError as exc:
        line = unwritable_line(exc, out, flag)
        if line is None:
            raise
        raise FeedlineError(line) from None


def unwritable_line(exc: OSError, out: str | os.PathLike | None, flag: str = "OUT") -> str | None:
    """The one-line message for ``exc`` when it is about writing ``out``; None otherwise."""
    why = UNWRITABLE.get(exc.errno)
    if out is None or why is None or exc.filename is None:
        return None
    where = os.path.abspath(os.fsdecode(exc.filename))
    target = os.path.abspath(os.fspath(out))
    if not _related(where, target):
        return None
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = file_in_the_way(target)
        if blocker is not None:
            where, why = blocker, f"{blocker} is a file, not a folder"
    return (f"{where}: cannot write {flag} {target} ({why}); "
            f"choose a writable place for {flag}, or fix the permissions")


def _related(where: str, target: str) -> bool:
    """``where`` is ``target``, a side file of it (OUT.partial, OUT.errors.csv), inside it,
    or a folder above it."""
    return (where.startswith(target) or target.startswith(where.rstrip(os.sep) + os.sep))


def file_in_the_way(target: str) -> str | None:
    """The nearest existing ancestor of ``target`` when it is not a folder."""
    path = os.path.dirname(target)
    while path and not os.path.lexists(path):
        path = os.path.dirname(path)
    return path if path and not os.path.isdir(path) else None
