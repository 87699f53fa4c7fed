"""`make gpu-rehearsal`: the exact core device call, here, before a GPU machine is used.

    python3 .ci/gpu/rehearsal.py [--keep DIR] [--no-rerun]

1. A fresh clone of the committed HEAD of the repository it is run from (what is not
   committed is not rehearsed: it says so).
2. `make gpu-wheels` in that clone (so it is proven to work from a fresh clone); then only
   .whl/gpu/bundle-1 is left under .whl/, as the call carries it. Prints the carried MiB.
3. The GPU machine's software (rehearsal_env.sh: Python 3.12, torch 2.11.0 and
   torchvision 0.26.0 as CUDA builds, numpy 2.5, pytest-timeout, lightning; a cached venv
   outside the repository) first on PATH as `python3`, as on the device.
4. The core call's command, word for word, with $OUT set, CUDA hidden
   (CUDA_VISIBLE_DEVICES=""), no network (a network namespace of its own, loopback only,
   where `unshare` works), under its timeout_s, in the work folder the device uses
   (/var/tmp/feedline-gpu, emptied first); then, unless --no-rerun, the rerun call
   (--only-failed) on the same work folder, as on the warm machine.
5. The proof: every stage of the plan is in $OUT/summary.json; those that need no GPU
   ended ok, those that need one "skipped" with the reason "no CUDA device" (not failed,
   crashed or timed out); the check exited 3 (no CUDA); each call ended inside its budget;
   what $OUT holds would come back (sizes); in the rerun, the stages that ended ok were kept.

Exit code 0 only when all of it holds. Standard library only (the host's python3).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = Path("/var/tmp/feedline-gpu")   # check.py's default: the device's work folder
OUT_FILE_MAX = 16 << 20                # what one file under $OUT may be to come back


def sh(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> str:
    return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def clone_head(repo: Path, dest: Path) -> str:
    sha = sh(["git", "rev-parse", "HEAD"], cwd=repo)
    if sh(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo):
        print("rehearsal: NOTE: the working tree has uncommitted changes; only the committed HEAD is rehearsed")
    sh(["git", "clone", "-q", "--no-checkout", str(repo), str(dest)])
    sh(["git", "checkout", "-q", sha], cwd=dest)
    return sha


def tree_mib(clone: Path) -> float:
    files = sh(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=clone).split("\0")
    return sum((clone / f).stat().st_size for f in files if f and (clone / f).is_file()) / 2**20


def device_env(venv_python: Path, out: Path) -> dict:
    """The environment of a device call: the image's python3 first on PATH, $OUT, CUDA hidden,
    none of this shell's Python settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "FEEDLINE_", "CUDA_", "GPU_WHEELS", "PIP_"))}
    env.update(PATH=f"{venv_python.parent}{os.pathsep}{env.get('PATH', '')}", OUT=str(out), CUDA_VISIBLE_DEVICES="")
    return env


def isolated(command: str) -> list[str]:
    """``command`` in bash, without the network where a network namespace can be made."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-n", "bash", "-c", f"ip link set lo up 2>/dev/null; {command}"]
    print("rehearsal: NOTE: no network namespace here (unshare -n); the call runs with the network")
    return ["bash", "-c", command]


def device_call(clone: Path, command: str, env: dict, timeout_s: float) -> tuple[int, float]:
    """The call as the device tool runs it: its exit code (124 at timeout_s) and seconds."""
    print(f"rehearsal: device call, timeout_s {timeout_s:.0f}: {command}", flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(isolated(command), cwd=clone, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        code = 124
    return code, time.monotonic() - t0


def verify(out: Path, stages, code: int, seconds: float, budget: float, kept_ok: bool) -> list[str]:
    """What must hold after a call without CUDA (see the module docstring)."""
    problems = []
    if code != 3:
        problems.append(f"the call exited {code}, not 3 (no CUDA device)" + (": stopped at timeout_s" if code == 124
                                                                             else ""))
    if seconds > budget + 15:
        problems.append(f"the call took {seconds:.0f} s, past its budget of {budget:.0f} s")
    for item in out.iterdir():
        if item.is_file() and item.stat().st_size > OUT_FILE_MAX:
            problems.append(f"$OUT/{item.name} is {item.stat().st_size >> 20} MiB: it would not come back")
    try:
        summary = json.loads((out / "summary.json").read_text())
        with tarfile.open(out / "gpu-results.tar.gz") as tar:
            if not any(n.endswith("/summary.json") for n in tar.getnames()):
                problems.append("gpu-results.tar.gz holds no summary.json")
    except (OSError, ValueError, tarfile.TarError) as exc:
        return problems + [f"$OUT lacks a readable summary.json and gpu-results.tar.gz: {exc}"]
    rows = summary.get("stages", {})
    for stage in stages:
        row = rows.get(f"core.{stage.name}")
        if row is None:
            problems.append(f"{stage.name}: not in summary.json")
        elif stage.cuda and (row.get("status") != "skipped" or not str(row.get("reason", "")).startswith(
                "no CUDA device")):
            problems.append(f"{stage.name}: needs a GPU, so must end 'skipped: no CUDA device'; ended "
                            f"{row.get('status')}: {row.get('reason') or ''}\n{row.get('tail', '')[-1500:]}")
        elif not stage.cuda and row.get("status") != "ok":
            problems.append(f"{stage.name}: needs no GPU, so must end ok; ended {row.get('status')}: "
                            f"{row.get('reason') or ''}\n{row.get('tail', '')[-1500:]}")
    plans = summary.get("plans", {}).get("core.plan", {})
    if kept_ok and plans.get("kept") != [s.name for s in stages if not s.cuda and s.name != "setup"]:
        problems.append(f"the rerun kept {plans.get('kept')}, not every stage that ended ok but setup")
    return problems


def table(out: Path) -> str:
    summary = json.loads((out / "summary.json").read_text())
    lines = [f"  {'stage':18} {'ended':10} {'seconds':>7}  reason"]
    for key, row in summary["stages"].items():
        kept = key.split(".", 1)[1] in summary["plans"]["core.plan"].get("kept", [])
        lines.append(f"  {key.split('.', 1)[1]:18} {row.get('status', '?'):10} "
                     f"{'kept' if kept else format(row.get('seconds', 0), '.1f'):>7}  {row.get('reason', '')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", type=Path, help="rehearse in this folder and keep it (default: a temporary one)")
    p.add_argument("--no-rerun", action="store_true", help="leave out the rerun call (--only-failed)")
    a = p.parse_args(argv)
    repo = Path(sh(["git", "rev-parse", "--show-toplevel"], cwd=HERE))
    root = a.keep or Path(tempfile.mkdtemp(prefix="feedline-gpu-rehearsal-"))
    lock = open(Path(tempfile.gettempdir()) / "feedline-gpu-rehearsal.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)   # one rehearsal at a time: they share the device's work folder
    try:
        return rehearse(repo, root, not a.no_rerun)
    finally:
        if a.keep is None:   # the clone, and the work folder's data (a few hundred MB)
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(WORK, ignore_errors=True)


def rehearse(repo: Path, root: Path, rerun: bool) -> int:
    clone = root / "clone"
    shutil.rmtree(clone, ignore_errors=True)
    sha = clone_head(repo, clone)
    print(f"rehearsal: {repo} at {sha[:12]}, cloned to {clone}", flush=True)
    subprocess.run(["bash", ".ci/gpu/wheels.sh"], cwd=clone, check=True,
                   env={k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "GPU_WHEELS_OUT"))})
    for item in (clone / ".whl" / "gpu").iterdir():   # the call carries bundle-1 alone
        if item.name != "bundle-1":
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    bundle_mib = sum(f.stat().st_size for f in (clone / ".whl/gpu/bundle-1").iterdir()) / 2**20
    carried = tree_mib(clone) + bundle_mib
    venv_python = Path(subprocess.run(["bash", str(clone / ".ci/gpu/rehearsal_env.sh")], check=True,
                                      capture_output=True, text=True).stdout.strip().splitlines()[-1])
    sys.path.insert(0, str(clone / ".ci" / "gpu"))
    import plan
    budget, timeout_s = plan.MAX_BUDGET_S, plan.MAX_BUDGET_S + plan.CALL_OVERHEAD_S
    shutil.rmtree(WORK, ignore_errors=True)   # a fresh machine's
    calls = [("core call", f"bash .ci/gpu/receive.sh; bash .ci/gpu/check.sh --budget-s {budget}", False)]
    if rerun:
        calls.append(("rerun", f"bash .ci/gpu/receive.sh; bash .ci/gpu/check.sh --budget-s {budget} "
                               f"--only-failed {WORK}/summary.json", True))
    problems, report = [], []
    for i, (name, command, kept_ok) in enumerate(calls, 1):
        out = root / f"out-{i}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        code, seconds = device_call(clone, command, device_env(venv_python, out), timeout_s)
        found = verify(out, plan.CORE, code, seconds, budget, kept_ok)
        problems += [f"{name}: {x}" for x in found]
        shown = table(out) if (out / "summary.json").is_file() else "  (no summary.json)"
        report.append(f"{name}: exit {code} in {seconds:.0f} s (budget {budget} s, timeout_s {timeout_s})\n{shown}")
    print("\n".join(report))
    print(f"rehearsal: carried {carried:.1f} MiB (working tree {carried - bundle_mib:.1f} + bundle-1 "
          f"{bundle_mib:.1f}; limit 64); B = {budget} s, timeout_s = {timeout_s} s; worst case on the device: "
          f"start {plan.START_S} + 2 x {timeout_s} + idle {plan.IDLE_S} = {plan.worst_case_s(budget):.0f} s "
          f"of {plan.SESSION_S}")
    for line in problems:
        print(f"rehearsal: PROBLEM {line}", file=sys.stderr)
    print("rehearsal: " + ("PASSED: the core device call is ready" if not problems else f"FAILED ({len(problems)})"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
