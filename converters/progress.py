"""The progress bar of a pack: tqdm on a terminal, and nothing at all (not even the
import of tqdm, a fifth of the start-up of `feedline pack`) without one."""
from __future__ import annotations

import sys


class NoBar:
    """What the packer calls on a progress bar, doing nothing."""

    n = 0

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(wanted: bool, total: int, initial: int):
    """A bar on stderr counting files from ``initial`` to ``total``, when ``wanted`` and
    stderr is a terminal; else a NoBar."""
    if not (wanted and sys.stderr.isatty()):
        return NoBar()
    from tqdm import tqdm
    return tqdm(total=total, initial=initial, unit="file", desc="pack", file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)
