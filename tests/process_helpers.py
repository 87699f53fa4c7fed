"""What tests that fork share: run a piece of work in a forked child and hear how it ended."""
from __future__ import annotations

import os


def in_child(work) -> tuple[int, bytes]:
    """Run ``work()`` (returning bytes) in a forked child: (exit code, negative for a signal; its bytes).
    A crash (an unmapped buffer read, say) stays in the child."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:   # never return into pytest
        code = 1
        try:
            os.close(read_fd)
            os.write(write_fd, work())
            code = 0
        except BaseException as exc:   # noqa: BLE001 - reported to the parent
            os.write(write_fd, f"{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        out = fh.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out



def fork_storm(source: str, forks: int, env: dict | None = None) -> dict:
    """``tests/fork_storm.py SOURCE FORKS`` in a process of its own: its counts of forked,
    hung, wrong and failed children, and the parent's read problems."""
    import json
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fork_storm.py")
    done = subprocess.run([sys.executable, script, source, str(forks)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
