"""`make gpu-check` (.ci/gpu/check.sh) on the GPU machine, from the repository root: the
stages of plan.py in order of value, each under a hard cap, the results under $OUT after
every stage.

    check.sh --budget-s 470              # the core call (no DALI)
    check.sh --call dali --budget-s 200  # the optional DALI call, once its bundles arrived

Every stage's command runs in its own process group (procs.py): on its cap the whole group
is killed, and so is anything that still carries the stage's marker, so nothing runs on
into the next stage. A crash is reported as "crashed" with its signal and last lines,
and the next stage runs. After each stage, WORK/stages/<call>.<stage>.json is written,
then summary.json and gpu-results.tar.gz are rewritten into $OUT, so a call stopped at its
limit still returns everything finished.

The carried wheels go into a --target folder first on PYTHONPATH (install.py says why);
feedline itself is not installed: the repository root is on PYTHONPATH and a `feedline`
command is on PATH.

--dry-run (`make gpu-dry-run`, dryrun.py) runs the same plan here with stand-ins for the
stages that need a GPU.
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

NO_CUDA = 3
PHOTOS = 4096
BENCH = {  # stage -> (script, JSON name, arguments besides --data/--out, sized to fit the caps)
    "loader": ("bench/gpu/loader_img_s.py", "loader_img_s.json",
               ["--batches", "20", "--repeats", "2", "--gil-seconds", "3"]),
    "prefetch": ("bench/gpu/prefetch_overlap.py", "prefetch_overlap.json", ["--steps", "30"]),
    "gpu_decode": ("bench/gpu/gpu_decode.py", "gpu_decode.json", ["--batches", "15", "--repeats", "2"]),
    "resnet50": ("bench/gpu/resnet50.py", "resnet50.json", ["--epochs", "1"]),
    "ddp": ("bench/gpu/ddp.py", "ddp.json", []),
    "grid_splice": ("bench/gpu/grid_splice.py", "grid_splice.json", ["--images", "1024", "--repeats", "2"]),
    # the worker engine's rows, the modes in order of value; a row is written as soon as it is measured
    "scaling": ("bench/scaling.py", "scaling.json",
                ["--engines", "processes", "--modes", "float,callable,recipe,uint8", "--workers", "16",
                 "--seconds", "3"]),
    "dali_decode": ("bench/gpu/gpu_decode.py", "gpu_decode_dali.json", ["--batches", "15", "--repeats", "2"]),
}


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
        """summary.json and the results tarball, into the work folder and $OUT."""
        try:
            summary.write(self.stages, self.logs, self.work / "results", self.out)
        except Exception:   # the stage files stay; the next stage's write tries again
            print(f"check: could not write the summary:\n{traceback.format_exc()}", flush=True)

    # -- stages ------------------------------------------------------------------------
    def setup(self, cap_s: float) -> dict:
        return install.setup(self, cap_s)

    def smoke(self, cap_s: float) -> dict:
        out = self.work / "smoke.json"
        out.unlink(missing_ok=True)
        cmd = [self.python, str(HERE / "smoke.py"), "--out", str(out), "--child-cap-s", f"{max(3.0, cap_s / 3):.0f}"]
        if self.call == "dali":
            cmd.append("--dali")
        outcome = self.run(self.command("smoke", cmd, cap_s), cap_s, self.logs / f"{self.call}.smoke.log")
        self.info = json.loads(out.read_text()) if out.is_file() else {}
        result = {**outcome.as_dict(), **self.info}
        if self.info and not self.info.get("region_decode_safe", True):
            self.env["FEEDLINE_GPU_REGION_DECODE"] = "0"   # gpu_region: whole images, cropped on the GPU
            result["set"] = "FEEDLINE_GPU_REGION_DECODE=0 for every later stage"
        return result

    def data_stage(self, cap_s: float) -> dict:
        cmd = [self.python, "bench/gpu/photos.py", "--n", str(PHOTOS), "--out", str(self.work / "data")]
        outcome = self.run(self.command("data", cmd, cap_s), cap_s, self.logs / f"{self.call}.data.log")
        lines = [x for x in (self.logs / f"{self.call}.data.log").read_text(errors="replace").splitlines()
                 if x.startswith("{")]
        self.data = json.loads(lines[-1]) if outcome.status == "ok" and lines else {}
        return {**outcome.as_dict(), **self.data}

    def tests_stage(self, cap_s: float, marker: str) -> dict:
        files = pytest_runs.files_marked(self.tests, marker)
        return {"marker": marker, **pytest_runs.run_files(
            lambda cmd, cap, log: self.run(self.command(self.stage_now, cmd, cap), cap, log), self.python, files,
            marker, cap_s, time.monotonic, self.logs, per_test_s=max(5.0, 30 * self.scale))}

    def rest(self, cap_s: float) -> dict:
        if self.call != "core":
            return {"status": "ok", "note": "nothing planned"}
        env = dict(self.env, CUDA_VISIBLE_DEVICES="")   # the CPU suite must not take the GPU (NCCL ranks on it)
        row = pytest_runs.run_file(
            lambda cmd, cap, log: self.run(self.command(REST_STAGE, cmd, cap), cap, log, env=env), self.python,
            self.tests, "not cuda", cap_s, max(5.0, 30 * self.scale), self.logs)
        return {"marker": "not cuda", "cuda_hidden": True, **row}

    def bench(self, stage: str, cap_s: float) -> dict:
        script, name, extra = BENCH[stage]
        out = self.work / "bench" / name
        out.parent.mkdir(exist_ok=True)
        out.unlink(missing_ok=True)
        cmd = [self.python, script, "--out", str(out), *extra]
        packed = self.data.get("packed", str(self.work / "data" / f"photos-{PHOTOS}.lmdb"))
        if stage == "scaling":
            cmd += ["--store", packed]
        elif stage != "prefetch":
            cmd += ["--data", packed]
        if stage == "loader":
            cmd += ["--folder", self.data.get("folder", str(self.work / "data" / f"photos-{PHOTOS}"))]
        if stage in ("resnet50", "ddp", "loader"):   # their own timeout inside the cap, so they write their JSON
            share = {"resnet50": 0.8, "ddp": 0.4, "loader": 0.9}[stage]
            cmd += ["--timeout", f"{max(5.0, cap_s * share):.0f}"]
        if stage == "ddp":
            cmd += ["--nproc", str(self.info.get("gpus") or 1)]   # world size = the GPUs present
        outcome = self.run(self.command(stage, cmd, cap_s), cap_s, self.logs / f"{self.call}.{stage}.log")
        return {**outcome.as_dict(), "json": str(out) if out.is_file() else None}

    def command(self, stage: str, cmd: list[str], cap_s: float) -> list[str]:
        """``cmd``, or in the dry run the stand-in for ``stage`` (dryrun.py)."""
        if self.standins is None:
            return cmd
        behaviour = self.standins.get(stage)
        if behaviour is None:
            return cmd
        return [self.python, str(HERE / "dryrun.py"), "standin", behaviour, "--cap-s", f"{cap_s:.2f}",
                "--out", str(self.out or self.work), "--stage", stage]

    def stage(self, name: str, cap_s: float) -> dict:
        if name == "setup":
            return self.setup(cap_s)
        if name == "smoke":
            return self.smoke(cap_s)
        if name == "data":
            return self.data_stage(cap_s)
        if name == "cuda_tests":
            return self.tests_stage(cap_s, "cuda")
        if name == "dali_tests":
            return self.tests_stage(cap_s, "dali")
        if name == REST_STAGE:
            return self.rest(cap_s)
        return self.bench(name, cap_s)

    # -- the plan ------------------------------------------------------------------------
    def run_plan(self) -> int:
        t0 = time.monotonic()
        deadline = t0 + self.budget_s
        names = list(self.caps)
        left_over = procs.sweep(self.marker, prefix=True)
        if left_over:
            print(f"check: killed {len(left_over)} processes an earlier check left running: {left_over}", flush=True)
        for old in self.stages.glob(f"{self.call}.*.json"):   # a rerun of this call replaces its results
            old.unlink()
        print(plan.table(plan.CALLS[self.call], self.caps, self.budget_s), flush=True)
        self.save("plan", {"call": self.call, "budget_s": self.budget_s, "caps": self.caps, "scale": self.scale,
                           "reserve_s": plan.RESERVE_S * self.scale, "stages": names,
                           "not_planned": [s.name for s in plan.CALLS[self.call] if s.name not in self.caps]})
        code = 0
        for i, name in enumerate(names):
            self.stage_now = name
            left = deadline - time.monotonic() - plan.RESERVE_S * self.scale
            cap, why_not = plan.cap_now(self.call, self.caps, name, left, self.scale)
            started = time.monotonic()
            if code == NO_CUDA:
                result = {"status": "skipped", "reason": "no CUDA device"}
            elif why_not is not None:
                status, reason = why_not.split(": ", 1)
                result = {"status": status, "reason": reason}
            else:
                try:
                    result = self.stage(name, cap)
                except (Exception, SystemExit) as exc:   # a bug of the check, a refused manifest: said, and on
                    if isinstance(exc, Stopped):   # the stage's processes are gone (procs); say so, then stop
                        self.save(name, {"status": "stopped", "reason": str(exc), "stage": name, "order": i})
                        self.publish()
                        raise
                    result = {"status": "error", "reason": f"{type(exc).__name__}: {exc}",
                              "tail": procs.tail_of(traceback.format_exc())}
            result.update(stage=name, order=i, cap_s=round(cap, 1), seconds=round(time.monotonic() - started, 1),
                          at_s=round(time.monotonic() - t0, 1))
            self.save(name, result)
            if name == "smoke" and self.standins is None and self.info.get("available") is False:
                code = NO_CUDA
            self.publish()
            print(f"check: {name}: {result.get('status')} in {result['seconds']:.0f} s (cap {cap:.0f} s)"
                  + (f" [{result.get('signal')}]" if result.get("signal") else ""), flush=True)
        return code


REST_STAGE = plan.REST


class Stopped(SystemExit):
    """SIGTERM: the device call's limit."""


def _stop(signum, frame):
    raise Stopped(f"check: stopped by signal {signum}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--call", choices=sorted(plan.CALLS), default="core")
    p.add_argument("--budget-s", type=float, default=plan.MAX_BUDGET_S,
                   help="seconds this call may take: `python .ci/gpu/plan.py --device-left-s N` says how many")
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
    code = check.run_plan()
    if code == NO_CUDA:
        print(f"check: STOP: no CUDA device here ({check.info.get('error')}); the wheels were checked and "
              "installed (see summary.json). The other stages need the GPU machine: see .ci/gpu/README.md",
              file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
