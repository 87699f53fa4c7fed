"""Run one stage's command under a hard cap, and leave nothing of it behind.

Each command starts in a new process group (``start_new_session``) with a marker in its
environment (``FEEDLINE_GPU_STAGE=<token>``). On its cap the whole group gets SIGTERM,
then SIGKILL; and whatever still carries the marker afterwards (a grandchild that made its
own session, as torchrun's or pytest's children may) is found under /proc and killed too.
A command that runs its own capped children passes them a token that starts with its own
(smoke.py does), so they go with it. The device tool ends what a call leaves running,
except processes in a session of their own: without this, a stage's orphans would run on
into the next stages and the next call.

Every wait has a timeout. A process stuck in the driver (uninterruptible sleep, state D)
outlives even SIGKILL: after KILL_WAIT_S it is abandoned (its pids in ``abandoned``), and
the check goes on to its next stage instead of waiting for it forever.

The outcome is one of: ok, failed (a non-zero exit), crashed (killed by a signal it did
not get from here, e.g. SIGSEGV), timed out (its cap), not started (OSError); always with
the last lines of its output. Standard library only.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MARKER = "FEEDLINE_GPU_STAGE"
TAIL_LINES = 40
GRACE_S = 3.0   # after SIGTERM, before SIGKILL
KILL_WAIT_S = 5.0   # after SIGKILL: longer, and the process is stuck in the kernel; abandoned


@dataclass
class Outcome:
    status: str                 # ok | failed | crashed | timed out | not started
    returncode: int | None
    seconds: float
    cap_s: float
    tail: str                   # the last lines of stdout and stderr together
    signal: str | None = None   # the signal that ended it (crashed)
    orphans_killed: list[int] = field(default_factory=list)
    abandoned: list[int] = field(default_factory=list)   # alive after SIGKILL (stuck in the driver): left behind

    def as_dict(self) -> dict:
        return asdict(self)


def tail_of(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def marked_pids(token: str, prefix: bool = False) -> list[int]:
    """Processes whose environment carries ``MARKER=token`` (or, with ``prefix``, a value
    starting with ``token``); readable ones only: our own user's."""
    needle = f"{MARKER}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:   # gone, or another user's
            continue
        values = env.split(b"\0")
        if needle in values or (prefix and any(v.startswith(needle) for v in values)):
            found.append(int(entry.name))
    return sorted(found)


def send(pid: int, sig: int, group: bool = False) -> None:
    """``sig`` to process ``pid`` (its process group with ``group``); gone or not ours: nothing."""
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def sweep(token: str, prefix: bool = False, wait_s: float = 2.0) -> list[int]:
    """SIGKILL every process still marked with ``token`` (or a token starting with it),
    then wait at most ``wait_s`` for them to go; the pids killed."""
    killed = marked_pids(token, prefix)
    for pid in killed:
        send(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while killed and time.monotonic() < deadline and alive(marked_pids(token, prefix)):
        time.sleep(0.05)
    return killed


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie has ended: its parent only has to reap it)."""
    found = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            found.append(pid)
    return found


def _reap(proc: subprocess.Popen, wait_s: float) -> bool:
    """Wait at most ``wait_s`` for ``proc`` to end; False if it is still there."""
    try:
        proc.wait(timeout=wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def run_capped(cmd: list[str], cap_s: float, *, cwd: Path, env: dict, log: Path, token: str) -> Outcome:
    """Run ``cmd`` for at most ``cap_s`` seconds, its output in ``log``; see the module docstring."""
    env = dict(env, **{MARKER: token})
    t0 = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:   # no such program, not executable, no memory
            return Outcome("not started", None, 0.0, cap_s, f"{type(exc).__name__}: {exc}")
        timed_out = ended = False
        try:
            ended = _reap(proc, max(cap_s, 0.1))
            if not ended:
                timed_out = True
                send(proc.pid, signal.SIGTERM, group=True)
                ended = _reap(proc, GRACE_S)
                if not ended:
                    send(proc.pid, signal.SIGKILL, group=True)
                    ended = _reap(proc, KILL_WAIT_S)
        except BaseException:   # the check itself stopped (SIGTERM at the call's limit, ^C): the stage goes too
            send(proc.pid, signal.SIGKILL, group=True)
            sweep(token, prefix=True)
            raise
        send(proc.pid, signal.SIGKILL, group=True)   # whatever of its group outlived it
    orphans = [pid for pid in sweep(token, prefix=True) if pid != proc.pid]
    abandoned = alive(sorted(set(marked_pids(token, prefix=True) + ([] if ended else [proc.pid]))))
    seconds = time.monotonic() - t0
    text = log.read_bytes().decode("utf-8", "replace")
    rc = proc.returncode
    if abandoned:
        text += (f"\n[processes {abandoned} still alive after SIGKILL (stuck in the kernel, e.g. the GPU driver): "
                 "abandoned, the check goes on]")
    if timed_out:
        return Outcome("timed out", rc, seconds, cap_s, tail_of(text) + f"\n[stopped at its cap of {cap_s:.0f} s]",
                       orphans_killed=orphans, abandoned=abandoned)
    number = -rc if rc < 0 else rc - 128 if 128 < rc < 160 else None   # 139: a shell's SIGSEGV
    if number is not None:
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
        return Outcome("crashed", rc, seconds, cap_s, tail_of(text), signal=name, orphans_killed=orphans,
                       abandoned=abandoned)
    return Outcome("ok" if rc == 0 else "failed", rc, seconds, cap_s, tail_of(text), orphans_killed=orphans,
                   abandoned=abandoned)
