"""pytest on the GPU machine with crash isolation: one process per test file, each under
its own cap, so a test that kills its process (a segfault in a CUDA library) or hangs
loses only its own file, which is reported as crashed or timed out with the test it was
in and the last lines it printed; the next file still runs.

Counts come from the file's JUnit XML when pytest got to write it, else from its verbose
output (a crashed process writes no XML). Per-test timeouts: pytest-timeout when the
interpreter has it (the GPU image does), else faulthandler's traceback dump at the same
time and the file's cap. Standard library only.
"""
from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable

from procs import Outcome

OUTCOME = re.compile(r"^(?P<test>\S+\.py::\S+)(?: .*?)? (?P<result>PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", re.M)
NODE = re.compile(r"^(?P<test>\S+\.py::\S+)", re.M)
FIRST = ("test_cuda_finisher.py",)   # the files of most value first


def files_marked(tests: Path, marker: str, leave_out_module_mark: str | None = None) -> list[Path]:
    """Test files that mention ``pytest.mark.<marker>`` (a module mark, a test's or a param's),
    less those whose module mark is ``leave_out_module_mark`` (every test of such a file
    is deselected by "cuda and not dali": its process would start for nothing)."""
    files = []
    for f in sorted(tests.glob("test_*.py")):
        text = f.read_text(errors="replace")
        if f"mark.{marker}" not in text:
            continue
        if leave_out_module_mark and re.search(rf"^pytestmark\s*=.*\bmark\.{leave_out_module_mark}\b", text, re.M):
            continue
        files.append(f)
    return sorted(files, key=lambda f: (f.name not in FIRST, f.name))


def junit_counts(path: Path) -> dict | None:
    """passed, failed (failures and errors), skipped from a JUnit XML; None without one."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"] + total["errors"], "skipped": total["skipped"]}


def log_counts(text: str) -> dict:
    """Counts from ``pytest -v`` output, and the test that was running when it stopped."""
    results = {m["test"]: m["result"] for m in OUTCOME.finditer(text)}
    started = [m["test"] for m in NODE.finditer(text)]
    running = next((t for t in reversed(started) if t not in results), None)
    values = list(results.values())
    return {"passed": values.count("PASSED") + values.count("XFAIL") + values.count("XPASS"),
            "failed": values.count("FAILED") + values.count("ERROR"), "skipped": values.count("SKIPPED"),
            "running_when_stopped": running,
            "failed_tests": sorted(t for t, r in results.items() if r in ("FAILED", "ERROR"))}


def timeout_args(per_test_s: float) -> list[str]:
    if importlib.util.find_spec("pytest_timeout") is not None:
        return [f"--timeout={per_test_s:.0f}", "--timeout-method=signal"]
    return ["-o", f"faulthandler_timeout={per_test_s:.0f}"]


def run_file(run: Callable[[list[str], float, Path], Outcome], python: str, test: Path, marker: str, cap_s: float,
             per_test_s: float, logs: Path, extra: list[str] = ()) -> dict:
    """One test file in its own process; a dict saying what happened."""
    junit = logs / f"junit-{test.stem}.xml"
    junit.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-m", marker, f"--junitxml={junit}",
           *timeout_args(per_test_s), *extra, str(test)]
    outcome = run(cmd, cap_s, logs / f"pytest-{test.stem}.log")
    text = (logs / f"pytest-{test.stem}.log").read_text(errors="replace") \
        if (logs / f"pytest-{test.stem}.log").is_file() else ""
    parsed = log_counts(text)
    counts = junit_counts(junit) or {k: parsed[k] for k in ("passed", "failed", "skipped")}
    status = outcome.status
    if status == "failed" and outcome.returncode == 5:
        status = "no tests"            # every test deselected by the marker
    elif status == "failed" and outcome.returncode == 1:
        status = "tests failed"
    row = {"file": test.name, "status": status, **counts, "seconds": round(outcome.seconds, 1),
           "cap_s": round(cap_s, 1), "returncode": outcome.returncode}
    if outcome.signal:
        row["signal"] = outcome.signal
    if status not in ("ok", "no tests"):
        row.update(failed_tests=parsed["failed_tests"], running_when_stopped=parsed["running_when_stopped"],
                   tail=outcome.tail)
    return row


def run_files(run, python: str, files: list[Path], marker: str, cap_s: float, clock: Callable[[], float],
              logs: Path, per_test_s: float = 30.0, extra: list[str] = ()) -> dict:
    """Every file in turn inside ``cap_s`` seconds in all: a file gets an even share of what
    is left, or one test's timeout and a start if that is more, but never more than half of
    what is left, so one hung file cannot take the time of all the others. Files not
    reached are listed as such."""
    logs.mkdir(parents=True, exist_ok=True)
    end = clock() + cap_s
    rows = []
    for i, test in enumerate(files):
        left = end - clock()
        if left < 2.0:
            rows.append({"file": test.name, "status": "not reached (stage cap)"})
            continue
        share = max(left / (len(files) - i), min(left / 2, per_test_s + 10))   # one slow test and a start
        rows.append(run_file(run, python, test, marker, min(share, left), per_test_s, logs, extra))
    total = {k: sum(r.get(k) or 0 for r in rows) for k in ("passed", "failed", "skipped")}
    bad = [r for r in rows if r["status"] not in ("ok", "no tests")]
    return {"status": "ok" if not bad else "problems", **total, "files": rows,
            "crashed": [r["file"] for r in rows if r["status"] == "crashed"],
            "timed_out": [r["file"] for r in rows if r["status"] == "timed out"]}


def run_together(run, python: str, files: list[Path], marker: str, cap_s: float, per_test_s: float,
                 logs: Path) -> dict:
    """Every file in one pytest process: where there is no CUDA device, each test skips, so
    one process per file would isolate nothing; what this proves is that every file
    collects with this machine's packages (a collection error fails it)."""
    logs.mkdir(parents=True, exist_ok=True)
    junit, log = logs / "junit-together.xml", logs / "pytest-together.log"
    junit.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-m", marker, f"--junitxml={junit}",
           *timeout_args(per_test_s), *map(str, files)]
    outcome = run(cmd, cap_s, log)
    text = log.read_text(errors="replace") if log.is_file() else ""
    parsed = log_counts(text)
    counts = junit_counts(junit) or {k: parsed[k] for k in ("passed", "failed", "skipped")}
    row = {"status": "ok" if outcome.status == "ok" else "problems", **counts, "together": True,
           "files": [{"file": f.name, "status": "collected" if outcome.status == "ok" else outcome.status}
                     for f in files], "crashed": [], "timed_out": [], "returncode": outcome.returncode}
    if outcome.status != "ok":
        row.update(failed_tests=parsed["failed_tests"], tail=outcome.tail)
    return row
