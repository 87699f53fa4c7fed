"""sources/shutdown.py: every thread owner registered is closed at interpreter exit, before
finalization; one that is gone by then is not kept alive for it."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

from feedline.sources import shutdown


class Owner:
    closed = 0

    def close(self) -> None:
        Owner.closed += 1


def test_an_owner_alive_at_exit_is_closed_then():
    script = textwrap.dedent("""
        from feedline.sources.shutdown import close_at_exit

        class Owner:
            def close(self):
                print("closed", flush=True)

        keep = Owner()
        close_at_exit(keep)
        print("exiting", flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.split() == ["exiting", "closed"], result.stderr


def test_an_owner_is_held_weakly():
    owner = Owner()
    shutdown.close_at_exit(owner)
    assert owner in shutdown._owners
    del owner
    gc.collect()
    assert not any(isinstance(o, Owner) for o in shutdown._owners)
