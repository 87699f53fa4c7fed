"""Making a finished file's rename survive a crash: shared by the packer and the trainer."""
from __future__ import annotations

import os


def fsync_folder(folder: str) -> None:
    """fsync ``folder`` so that a rename inside it is durable. Best effort: not possible
    (nor needed) everywhere, e.g. on Windows."""
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
