"""Stop the sources' threads before the interpreter shuts down.

A loader left mid-epoch when a program ends still has decode threads inside native code
(OpenCV, libjpeg-turbo, torch); if Python finalizes with them running, the native
libraries' thread pools are destroyed under them and the process can abort ("terminate
called without an active exception"). Every thread owner registers itself here,
and is closed (its threads stopped and joined) at exit, before finalization.
"""
from __future__ import annotations

import atexit
import logging
import weakref

_owners: "weakref.WeakSet" = weakref.WeakSet()


def close_at_exit(owner) -> None:
    """Call ``owner.close()`` at interpreter exit if it is still alive then."""
    _owners.add(owner)


@atexit.register
def _close_all() -> None:
    for owner in list(_owners):
        try:
            owner.close()
        except Exception:   # one that fails must not leave the others running (a worker joined forever)
            logging.getLogger(__name__).exception("closing %r at exit failed", owner)
