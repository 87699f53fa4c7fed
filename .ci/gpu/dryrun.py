"""`make gpu-dry-run`: the GPU check's whole plan on this CPU machine, its stages replaced
by stand-ins that sleep, crash (SIGSEGV), hang (with children, one of them in a session of
its own) and say "no CUDA device" (exit code 3), and proof that the plan holds:

  - the budget arithmetic: the caps and the reserve sum to the budget, no stage ran past
    its cap (plus the kill's grace), the whole run stayed inside the budget;
  - a crash and a hang are reported as such (signal, last lines, the test running), a
    stage without its device as "skipped: no CUDA device", and every later stage still ran;
  - no process of the check survives it (a marker in the environment, looked for under
    /proc), the hung stand-ins' own children included;
  - summary.json and the results tarball under $OUT were complete after every stage: each
    stand-in, when it starts, reads them and records which stages they hold.

The setup stage is real (a small wheel carried, received, installed with pip), and so is
the pytest stage, on generated test files that pass, segfault and hang (and one whose
module mark is dali, which the core call must not start). `make gpu-rehearsal` is the
real thing: the same call with the GPU machine's software, CUDA hidden.

    python .ci/gpu/dryrun.py run [--scale 0.25] [--keep DIR]
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import plan  # noqa: E402
import procs  # noqa: E402

DRY_MARKER = "FEEDLINE_GPU_DRY_RUN"
STANDINS = {"smoke": "sleep", "data": "sleep", "loader": "sleep", "prefetch": "crash", "gpu_whole_decode": "hang",
            "resnet50": "nocuda", "grid_splice": "sleep"}
NO_CUDA = 3   # check.py's: a stage's command that needs the device and has none exits so
TESTS = {
    "conftest.py": ("def pytest_configure(config):\n    config.addinivalue_line('markers', 'cuda: a GPU test')\n"
                    "    config.addinivalue_line('markers', 'dali: a DALI test')\n"),
    "test_cuda_1_pass.py": "import pytest\n\n@pytest.mark.cuda\ndef test_passes():\n    assert 1 + 1 == 2\n",
    "test_cuda_3_segfault.py": ("import os, signal\nimport pytest\n\n@pytest.mark.cuda\ndef test_before():\n    pass\n\n"
                              "@pytest.mark.cuda\ndef test_segfaults():\n    print('about to segfault', flush=True)\n"
                              "    os.kill(os.getpid(), signal.SIGSEGV)\n"),
    "test_cuda_2_hang.py": "import time\nimport pytest\n\n@pytest.mark.cuda\ndef test_hangs():\n    time.sleep(3600)\n",
    "test_cuda_4_dali.py": ("import pytest\n\npytestmark = pytest.mark.dali\n\n@pytest.mark.cuda\n"
                            "def test_needs_dali():\n    raise AssertionError('a DALI file ran in the core call')\n"),
}
GRACE_S = procs.GRACE_S + 3.0   # a capped stage may outlive its cap by the kill's grace and the sweep


# -- the stand-ins (run by check.py in place of a GPU stage) ------------------------------

def standin(mode: str, stage: str, cap_s: float, out: Path) -> int:
    seen = {"stage": stage, "mode": mode, "pid": os.getpid(), "summary_stages": None, "tar_has_summary": None}
    summary = out / "summary.json"
    if summary.is_file():
        seen["summary_stages"] = list(json.loads(summary.read_text())["stages"])
    tarball = out / "gpu-results.tar.gz"
    if tarball.is_file():
        with tarfile.open(tarball) as tar:
            seen["tar_has_summary"] = any(n.endswith("/summary.json") for n in tar.getnames())
    seen_dir = Path(os.environ["FEEDLINE_GPU_WORK"]) / "seen"
    seen_dir.mkdir(exist_ok=True)
    if mode == "hang":   # children that must not outlive the stage: one in the group, one in its own session
        kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]),
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)]
        seen["children"] = [k.pid for k in kids]
    (seen_dir / f"{stage}.json").write_text(json.dumps(seen))
    print(f"stand-in for {stage}: {mode} (cap {cap_s:.1f} s)", flush=True)
    if mode == "sleep":
        time.sleep(min(0.3, cap_s / 5))
        return 0
    if mode == "nocuda":
        print("no CUDA device: this benchmark measures the GPU path", flush=True)
        return NO_CUDA
    if mode == "crash":
        print("about to segfault", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    time.sleep(3600)
    return 0


# -- the run ------------------------------------------------------------------------------

def tiny_wheel(folder: Path) -> Path:
    """A real wheel that installs one module (what the setup stage carries in the dry run)."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = "fl_dry_probe-1.0"
    members = {"fl_dry_probe/__init__.py": b"VALUE = 42\n",
               f"{dist}.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fl-dry-probe\nVersion: 1.0\n\n",
               f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: dryrun\nRoot-Is-Purelib: true\n"
                                          b"Tag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in members.items()) + f"{dist}.dist-info/RECORD,,\n"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist}.dist-info/RECORD", record)
    return path


def marked(token: str) -> list[int]:
    """Processes whose environment carries DRY_MARKER=token."""
    needle = f"{DRY_MARKER}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def dry_run(root: Path, scale: float, bundles: Path | None = None) -> tuple[list[str], dict]:
    """Run the plan in ``root``; (problems found, the final summary)."""
    import bundle
    work, out, tests = root / "work", root / "out", root / "tests"
    for folder in (work, out, tests):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    for name, text in TESTS.items():
        (tests / name).write_text(text)
    if bundles is None:
        bundles = root / "bundles"
        bundle.pack({"core": tiny_wheel(root / "wheels").parent}, bundles, root / "xz", 1 << 20, 1 << 20)
    standins = root / "standins.json"
    standins.write_text(json.dumps(STANDINS))
    budget = plan.full_budget(plan.CORE, scale)
    token = uuid.uuid4().hex
    env = dict(os.environ, FEEDLINE_GPU_WORK=str(work), GPU_WHEELS_OUT=str(bundles), OUT=str(out),
               PYTHONUNBUFFERED="1", **{DRY_MARKER: token})
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(HERE / "check.py"), "--budget-s", str(budget), "--scale", str(scale),
                           "--dry-run", str(standins), "--tests", str(tests)], env=env, capture_output=True,
                          text=True, timeout=budget * 2 + 60)
    wall = time.monotonic() - t0
    print(proc.stdout, end="")
    problems = [] if proc.returncode == 0 else [f"check.py exited {proc.returncode}: {proc.stderr[-2000:]}"]
    survivors = marked(token)
    if survivors:
        problems.append(f"processes of the check survived it: {survivors}")
    summary_path = out / "summary.json"
    if not summary_path.is_file():
        return problems + ["no summary.json under $OUT"], {}
    final = json.loads(summary_path.read_text())
    stages = final["stages"]
    caps = final["plans"]["core.plan"]["caps"]
    order = [f"core.{n}" for n in caps]
    # the budget arithmetic
    if abs(sum(caps.values()) + plan.RESERVE_S * scale - budget) > 0.01:
        problems.append(f"caps {sum(caps.values()):.2f} s + reserve do not sum to the budget {budget:.2f} s")
    if wall > budget + 15:
        problems.append(f"the check took {wall:.1f} s, over its budget of {budget:.1f} s")
    for key in order:
        row = stages.get(key)
        if row is None:
            problems.append(f"stage {key} missing from summary.json")
        elif row.get("status") == "out of time" or (row.get("status") == "skipped" and key != "core.resnet50"):
            problems.append(f"stage {key} did not run: {row.get('status')}")
        elif row["seconds"] > row["cap_s"] + GRACE_S:
            problems.append(f"stage {key} took {row['seconds']} s, over its cap {row['cap_s']} s")
    # the crash and the hangs, reported as such
    expect = {"core.prefetch": ("crashed", "SIGSEGV", "about to segfault"),
              "core.gpu_whole_decode": ("timed out", None, "hang"),
              "core.resnet50": ("skipped", None, "no CUDA device")}
    for key, (status, sig, text) in expect.items():
        row = stages.get(key, {})
        said = (row.get("tail") or "") + (row.get("reason") or "")
        if row.get("status") != status or (sig and row.get("signal") != sig) or text not in said:
            problems.append(f"{key}: expected {status} {sig or ''} with '{text}' in its tail, got {row.get('status')} "
                            f"{row.get('signal')}")
    files = {r["file"]: r for r in final["tests"].get("cuda_tests", {}).get("files", [])}
    seg, hang = files.get("test_cuda_3_segfault.py", {}), files.get("test_cuda_2_hang.py", {})
    if seg.get("status") != "crashed" or not (seg.get("running_when_stopped") or "").endswith("test_segfaults") \
            or seg.get("passed") != 1:
        problems.append(f"the segfaulting test file: expected crashed in test_segfaults after 1 passed, got {seg}")
    if hang.get("status") not in ("timed out", "tests failed"):
        problems.append(f"the hanging test file: expected timed out, got {hang}")
    if files.get("test_cuda_1_pass.py", {}).get("status") != "ok":
        problems.append(f"the passing test file: {files.get('test_cuda_1_pass.py')}")
    if "test_cuda_4_dali.py" in files:
        problems.append("the file whose module mark is dali was started in the core call")
    # the hung stand-in's children
    for stage in [s for s, mode in STANDINS.items() if mode == "hang"]:
        seen = json.loads((work / "seen" / f"{stage}.json").read_text())
        alive = [pid for pid in seen.get("children", []) if _alive(pid)]
        if alive:
            problems.append(f"children of the hung {stage} stand-in still alive: {alive}")
    # summary.json and the tarball after every stage: what each stand-in saw when it started
    for stage in STANDINS:
        seen = json.loads((work / "seen" / f"{stage}.json").read_text())
        before = order[:order.index(f"core.{stage}")]
        if seen["summary_stages"] is None or [s for s in seen["summary_stages"] if s.startswith("core.")] != before:
            problems.append(f"when {stage} started, summary.json held {seen['summary_stages']}, not {before}")
        if not seen["tar_has_summary"]:
            problems.append(f"when {stage} started, $OUT had no results tarball with summary.json")
    return problems, final


def rerun_only_failed(root: Path, scale: float) -> tuple[list[str], dict]:
    """After ``dry_run`` in ``root``: the rerun call (``--only-failed WORK/summary.json``)
    with stand-ins that all work; (problems found, its summary). The stages that ended ok
    must be kept as they were, the others run again."""
    work, out, tests = root / "work", root / "out", root / "tests"
    before = json.loads((work / "summary.json").read_text())["stages"]
    standins = root / "standins-rerun.json"
    standins.write_text(json.dumps(dict.fromkeys(STANDINS, "sleep")))
    token = uuid.uuid4().hex
    env = dict(os.environ, FEEDLINE_GPU_WORK=str(work), GPU_WHEELS_OUT=str(root / "bundles"), OUT=str(out),
               PYTHONUNBUFFERED="1", **{DRY_MARKER: token})
    budget = plan.full_budget(plan.CORE, scale)
    proc = subprocess.run([sys.executable, str(HERE / "check.py"), "--budget-s", str(budget), "--scale", str(scale),
                           "--dry-run", str(standins), "--tests", str(tests),
                           "--only-failed", str(work / "summary.json")],
                          env=env, capture_output=True, text=True, timeout=budget * 2 + 60)
    print(proc.stdout, end="")
    problems = [] if proc.returncode == 0 else [f"the rerun exited {proc.returncode}: {proc.stderr[-2000:]}"]
    if marked(token):
        problems.append(f"processes of the rerun survived it: {marked(token)}")
    final = json.loads((out / "summary.json").read_text())
    ok_before = [k.split(".", 1)[1] for k, v in before.items() if v.get("status") == "ok" and k != "core.setup"]
    if final["plans"]["core.plan"]["kept"] != ok_before:
        problems.append(f"the rerun kept {final['plans']['core.plan']['kept']}, not {ok_before}")
    for name in ok_before:
        if final["stages"][f"core.{name}"] != before[f"core.{name}"]:
            problems.append(f"{name}: ok before, but its result changed in the rerun")
    return problems, final


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the dry run")
    r.add_argument("--scale", type=float, default=0.25,
                   help="the stages' caps and the budget times this (default 0.25: the pytest stage still fits its "
                        "files' starts); setup runs for real")
    r.add_argument("--keep", type=Path, help="run in this folder and keep it (default: a temporary one)")
    r.add_argument("--bundles", type=Path, help="carry these bundles (e.g. .whl/gpu) instead of a tiny wheel")
    s = sub.add_parser("standin", help=argparse.SUPPRESS)
    s.add_argument("mode", choices=("sleep", "crash", "hang", "nocuda"))
    s.add_argument("--stage", required=True)
    s.add_argument("--cap-s", type=float, required=True)
    s.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    if a.command == "standin":
        return standin(a.mode, a.stage, a.cap_s, a.out)
    with tempfile.TemporaryDirectory(prefix="feedline-gpu-dry-") as tmp:
        root = a.keep or Path(tmp)
        problems, final = dry_run(root, a.scale, a.bundles)
        if final:
            print("dry run: the rerun, --only-failed")
            again, _ = rerun_only_failed(root, a.scale)
            problems += again
    if final:
        caps = final["plans"]["core.plan"]["caps"]
        print(f"dry run: budget {final['plans']['core.plan']['budget_s']:.1f} s = caps {sum(caps.values()):.1f} s "
              f"+ reserve {final['plans']['core.plan']['reserve_s']:.1f} s")
        for key, row in final["stages"].items():
            print(f"  {key:20} {row.get('status', '?'):12} {row.get('seconds', 0):5.1f} s of {row.get('cap_s', 0):5.1f}"
                  + (f" [{row['signal']}]" if row.get("signal") else ""))
    for line in problems:
        print(f"dry run: PROBLEM {line}", file=sys.stderr)
    print("dry run: " + ("the plan holds" if not problems else f"{len(problems)} problems"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
