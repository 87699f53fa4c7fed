"""`make gpu-check` (.ci/gpu/check.sh) on the GPU machine, from the repository root: the
stages of plan.py in order of value, each under a hard cap, the results under $OUT after
every stage.

    check.sh --budget-s 270                                          # the core call (no DALI)
    check.sh --budget-s 270 --only-failed /var/tmp/feedline-gpu/summary.json   # its rerun
    check.sh --call dali --budget-s 200                              # the optional DALI call

Every stage's command runs in its own process group (procs.py): on its cap the whole group
is killed, and so is anything that still carries the stage's marker, so nothing runs on
into the next stage; a process that even SIGKILL does not end (stuck in the driver) is
abandoned and the next stage runs. A crash is reported as "crashed" with its signal and
last lines. After each stage, WORK/stages/<call>.<stage>.json is written, then
summary.json (in WORK and $OUT) and gpu-results.tar.gz ($OUT), so a call stopped at its
limit still returns everything finished. The benchmarks also rewrite their JSON after
every row and repeat, so a stage stopped at its cap keeps what it measured.

Without CUDA (`make gpu-rehearsal` here), every stage still runs as far as it can: setup
and data for real, the others up to where they need the device, where they end "skipped"
with the reason "no CUDA device"; the check then exits with 3.

--only-failed SUMMARY reruns the stages whose status in SUMMARY is not "ok" (setup always
runs: it is quick when the wheels are installed); the others keep their results.

The carried wheels go into a --target folder first on PYTHONPATH (install.py says why);
feedline itself is not installed: the repository root is on PYTHONPATH and a `feedline`
command is on PATH. --dry-run (`make gpu-dry-run`, dryrun.py) runs the plan here with
stand-ins for the stages.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
import traceback
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import install  # noqa: E402
import plan  # noqa: E402
import procs  # noqa: E402
import pytest_runs  # noqa: E402
import summary  # noqa: E402

NO_CUDA = 3          # a stage's command says so by this exit code; the check's own exit code without CUDA
NO_CUDA_REASON = "no CUDA device"
DATA = ["--per-core", "128", "--repeats", "8"]   # 2,048 photos on 16 cores, 16,384 records
BENCH = {  # stage -> (script, JSON name, arguments besides --data/--out, sized to fit the caps)
    "loader": ("bench/gpu/loader_img_s.py", "loader_img_s.json",
               ["--batches", "24", "--repeats", "2", "--gil-seconds", "3"]),
    "prefetch": ("bench/gpu/prefetch_overlap.py", "prefetch_overlap.json", ["--steps", "30"]),
    "gpu_whole_decode": ("bench/gpu/gpu_decode.py", "gpu_decode.json",
                         ["--batches", "16", "--repeats", "2", "--no-dali"]),
    "resnet50": ("bench/gpu/resnet50.py", "resnet50.json", ["--epochs", "1"]),
    "grid_splice": ("bench/gpu/grid_splice.py", "grid_splice.json", ["--images", "512", "--repeats", "2"]),
    "dali_decode": ("bench/gpu/gpu_decode.py", "gpu_decode_dali.json", ["--batches", "15", "--repeats", "2"]),
}
OWN_TIMEOUT = {"resnet50": 0.85, "loader": 0.9}   # share of the cap given as --timeout: they end in time, written


class Check:
    def __init__(self, call: str, work: Path, python: str, bundles: Path, budget_s: float, scale: float = 1.0,
                 out: Path | None = None, standins: dict | None = None, tests: Path = REPO / "tests"):
        self.call, self.work, self.python, self.bundles = call, work, python, bundles
        self.budget_s, self.scale, self.out, self.standins, self.tests = budget_s, scale, out, standins, tests
        self.stages = work / "stages"
        self.logs = work / "logs"
        for folder in (self.stages, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        self.site = work / ("site" if call == "core" else "site-dali")   # each call installs its own group
        bin_dir = work / "bin"
        bin_dir.mkdir(exist_ok=True)
        shim = bin_dir / "feedline"  # the console script, without installing feedline
        shim.write_text(f'#!/bin/sh\nexec "{python}" -m feedline "$@"\n')
        shim.chmod(0o755)
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(work / "site"), str(work / "site-dali"), str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
            LD_LIBRARY_PATH=os.pathsep.join(
                [str(work / install.LIB_DIR)] + [p for p in [os.environ.get("LD_LIBRARY_PATH")] if p]),
            PATH=os.pathsep.join([str(bin_dir), str(work / "site" / "bin"), os.environ.get("PATH", "")]),  # py-spy
            PYTHONUNBUFFERED="1")
        self.caps = plan.plan(plan.CALLS[call], budget_s, scale)
        # every stage's marker starts with this work folder's: a later check there ends what an
        # earlier one, stopped at its call's limit, left running in a session of its own
        self.marker = "w" + hashlib.sha256(str(work.resolve()).encode()).hexdigest()[:10] + "-"
        self.info: dict = {}
        self.data: dict = {}
        self.stage_now = ""

    # -- helpers ---------------------------------------------------------------------
    def run(self, cmd: list[str], cap_s: float, log: Path, env: dict | None = None) -> procs.Outcome:
        token = f"{self.marker}{self.call}-{self.stage_now}-{uuid.uuid4().hex[:10]}"
        return procs.run_capped(cmd, cap_s, cwd=REPO, env=env or self.env, log=log, token=token)

    def save(self, name: str, result: dict) -> None:
        path = self.stages / f"{self.call}.{name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
        os.replace(tmp, path)

    def publish(self) -> None:
        """summary.json (into the work folder too, for --only-failed) and the results tarball."""
        try:
            path = summary.write(self.stages, self.logs, self.work / "results", self.out)
            summary.atomic_write(self.work / "summary.json", path.read_text())
        except Exception:   # the stage files stay; the next stage's write tries again
            print(f"check: could not write the summary:\n{traceback.format_exc()}", flush=True)

    def no_cuda(self) -> bool:
        """The smoke stage found no CUDA device (unknown before it, or if it said nothing)."""
        return self.info.get("available") is False

    def outcome(self, stage: str, cmd: list[str], cap_s: float) -> dict:
        """``cmd`` run as ``stage`` (or its stand-in); exit code NO_CUDA means it needs the device."""
        result = self.run(self.command(stage, cmd, cap_s), cap_s, self.logs / f"{self.call}.{stage}.log").as_dict()
        if result["status"] == "failed" and result["returncode"] == NO_CUDA:
            result.update(status="skipped", reason=NO_CUDA_REASON)
        return result

    # -- stages ------------------------------------------------------------------------
    def smoke(self, cap_s: float) -> dict:
        out = self.work / "smoke.json"
        out.unlink(missing_ok=True)
        cmd = [self.python, str(HERE / "smoke.py"), "--out", str(out), "--child-cap-s", f"{max(3.0, cap_s / 3):.0f}"]
        if self.call == "dali":
            cmd.append("--dali")
        result = self.outcome("smoke", cmd, cap_s)
        self.info = json.loads(out.read_text()) if out.is_file() else {}
        return {**result, **self.info, "status": result["status"]}

    def after_smoke(self, result: dict) -> None:
        """What the smoke test found that the later stages need (also from a kept result)."""
        self.info = {k: v for k, v in result.items() if k not in ("status", "tail", "reason")}
        if result.get("region_decode_safe") is False:
            self.env["FEEDLINE_GPU_REGION_DECODE"] = "0"   # gpu_region: whole images, cropped on the GPU
            result["set"] = "FEEDLINE_GPU_REGION_DECODE=0 for every later stage"

    def data_stage(self, cap_s: float) -> dict:
        cmd = [self.python, "bench/gpu/photos.py", *DATA, "--out", str(self.work / "data")]
        result = self.outcome("data", cmd, cap_s)
        lines = [x for x in (self.logs / f"{self.call}.data.log").read_text(errors="replace").splitlines()
                 if x.startswith("{")]
        self.data = json.loads(lines[-1]) if result["status"] == "ok" and lines else {}
        return {**result, **self.data}

    def tests_stage(self, cap_s: float, marker: str) -> dict:
        """One process per test file (a crash loses its file alone); without CUDA, where every
        test skips, all in one process: each file collects, or the stage fails."""
        files = pytest_runs.files_marked(self.tests, marker.split()[0], leave_out_module_mark="dali"
                                         if "not dali" in marker else None)
        run = lambda cmd, cap, log: self.run(self.command(self.stage_now, cmd, cap), cap, log)  # noqa: E731
        per_test_s = max(5.0, 30 * self.scale)
        if self.no_cuda():
            result = pytest_runs.run_together(run, self.python, files, marker, cap_s, per_test_s, self.logs)
        else:
            result = pytest_runs.run_files(run, self.python, files, marker, cap_s, time.monotonic, self.logs,
                                           per_test_s=per_test_s)
        if result["status"] == "ok" and self.no_cuda() and not result["passed"] and not result["failed"]:
            result.update(status="skipped", reason=f"{NO_CUDA_REASON}: {result['skipped']} tests in {len(files)} "
                                                   "files collected, all skipped")
        return {"marker": marker, **result}

    def bench(self, stage: str, cap_s: float) -> dict:
        script, name, extra = BENCH[stage]
        out = self.work / "bench" / name
        out.parent.mkdir(exist_ok=True)
        out.unlink(missing_ok=True)
        cmd = [self.python, script, "--out", str(out), *extra]
        if stage != "prefetch":
            cmd += ["--data", self.data.get("packed") or str(self.work / "data" / "missing.lmdb")]
        if stage == "loader":
            cmd += ["--folder", self.data.get("folder") or str(self.work / "data" / "missing")]
        if stage in OWN_TIMEOUT:   # their own timeout inside the cap, so they end with their JSON written
            cmd += ["--timeout", f"{max(5.0, cap_s * OWN_TIMEOUT[stage]):.0f}"]
        result = self.outcome(stage, cmd, cap_s)
        return {**result, "json": str(out) if out.is_file() else None}

    def command(self, stage: str, cmd: list[str], cap_s: float) -> list[str]:
        """``cmd``, or in the dry run the stand-in for ``stage`` (dryrun.py)."""
        behaviour = (self.standins or {}).get(stage)
        if behaviour is None:
            return cmd
        return [self.python, str(HERE / "dryrun.py"), "standin", behaviour, "--cap-s", f"{cap_s:.2f}",
                "--out", str(self.out or self.work), "--stage", stage]

    def stage(self, name: str, cap_s: float) -> dict:
        if name == "setup":
            return install.setup(self, cap_s)
        if name == "smoke":
            return self.smoke(cap_s)
        if name == "data":
            return self.data_stage(cap_s)
        if name == "cuda_tests":
            return self.tests_stage(cap_s, "cuda and not dali")
        if name == "dali_tests":
            return self.tests_stage(cap_s, "dali")
        return self.bench(name, cap_s)

    # -- the plan ------------------------------------------------------------------------
    def run_plan(self, only_failed: Path | None = None) -> int:
        t0 = time.monotonic()
        deadline = t0 + self.budget_s
        names = list(self.caps)
        left_over = procs.sweep(self.marker, prefix=True)
        if left_over:
            print(f"check: killed {len(left_over)} processes an earlier check left running: {left_over}", flush=True)
        kept = summary.kept_stages(only_failed, self.stages, self.call, names) if only_failed else {}
        for old in self.stages.glob(f"{self.call}.*.json"):   # a rerun of this call replaces its results
            if old.stem.split(".", 1)[1] not in kept:
                old.unlink()
        print(plan.table(plan.CALLS[self.call], self.caps, self.budget_s), flush=True)
        if kept:
            print(f"check: --only-failed: keeping {', '.join(kept)} (ok before)", flush=True)
        self.save("plan", {"call": self.call, "budget_s": self.budget_s, "caps": self.caps, "scale": self.scale,
                           "reserve_s": plan.RESERVE_S * self.scale, "stages": names, "kept": list(kept),
                           "not_planned": [s.name for s in plan.CALLS[self.call] if s.name not in self.caps]})
        for i, name in enumerate(names):
            self.stage_now = name
            if name in kept:
                result = kept[name]
            else:
                result = self.run_stage(name, i, deadline, t0, tuple(kept))
            if name == "smoke":
                self.after_smoke(result)
            elif name == "data" and result.get("status") == "ok":
                self.data = {k: result.get(k) for k in ("folder", "packed", "photos", "images")}
            self.save(name, result)
            self.publish()
            print(f"check: {name}: {result.get('status')}" + (f" ({result['reason']})" if result.get("reason") else "")
                  + (" (kept)" if name in kept else f" in {result['seconds']:.0f} s (cap {result['cap_s']:.0f} s)")
                  + (f" [{result.get('signal')}]" if result.get("signal") else ""), flush=True)
        return NO_CUDA if self.no_cuda() and self.standins is None else 0

    def run_stage(self, name: str, order: int, deadline: float, t0: float, kept: tuple[str, ...]) -> dict:
        left = deadline - time.monotonic() - plan.RESERVE_S * self.scale
        cap, why_not = plan.cap_now(self.caps, name, left, self.scale, skipped=kept)
        started = time.monotonic()
        if why_not is not None:
            status, reason = why_not.split(": ", 1)
            result = {"status": status, "reason": reason}
        else:
            try:
                result = self.stage(name, cap)
            except (Exception, SystemExit) as exc:   # a bug of the check, a refused manifest: said, and on
                if isinstance(exc, Stopped):   # the stage's processes are gone (procs); say so, then stop
                    self.save(name, {"status": "stopped", "reason": str(exc), "stage": name, "order": order})
                    self.publish()
                    raise
                result = {"status": "error", "reason": f"{type(exc).__name__}: {exc}",
                          "tail": procs.tail_of(traceback.format_exc())}
        result.update(stage=name, order=order, cap_s=round(cap, 1), seconds=round(time.monotonic() - started, 1),
                      at_s=round(time.monotonic() - t0, 1))
        return result


class Stopped(SystemExit):
    """SIGTERM: the device call's limit."""


def _stop(signum, frame):
    raise Stopped(f"check: stopped by signal {signum}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--call", choices=sorted(plan.CALLS), default="core")
    p.add_argument("--budget-s", type=float, default=plan.MAX_BUDGET_S,
                   help="seconds this call may take: `python .ci/gpu/plan.py --device-left-s N` says how many")
    p.add_argument("--only-failed", type=Path, metavar="SUMMARY",
                   help="rerun only the stages that did not end ok in this summary.json (setup always runs)")
    p.add_argument("--dry-run", metavar="STANDINS_JSON", help=argparse.SUPPRESS)   # dryrun.py
    p.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)     # dryrun.py: shorter caps
    p.add_argument("--tests", type=Path, default=REPO / "tests", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    work = Path(os.environ.get("FEEDLINE_GPU_WORK", "/var/tmp/feedline-gpu"))
    bundles = Path(os.environ.get("GPU_WHEELS_OUT", REPO / ".whl" / "gpu"))
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None   # the device tool's
    standins = json.loads(Path(a.dry_run).read_text()) if a.dry_run else None
    try:
        check = Check(a.call, work, sys.executable, bundles, a.budget_s, a.scale, out, standins, a.tests)
    except ValueError as exc:   # a budget too small for any stage
        p.error(str(exc))
    signal.signal(signal.SIGTERM, _stop)   # the call's limit: the running stage's group goes with us
    code = check.run_plan(a.only_failed)
    if code == NO_CUDA:
        print(f"check: no CUDA device here ({check.info.get('error')}): the stages that need one ended "
              "'skipped: no CUDA device' (see summary.json). A GPU machine: see .ci/gpu/README.md", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
