"""`make gpu-check` (.ci/gpu/check.sh) on the GPU machine, from the repository root.

Stages, in order; each writes WORK/stages/NAME.json, so a later call on the same warm
machine can add to the results of an earlier one:

  wheels    receive the carried bundles, rebuild and check the wheels   (no CUDA)
  install   pip install --no-index --no-deps --target WORK/site        (no CUDA)
  cuda      the device, driver, CUDA and torch; stops here without CUDA (exit 3)
  data      10,000 photo-like JPEGs on all cores, packed to LMDB
  loader, gpu_decode, grid_splice, prefetch, resnet50, ddp    bench/gpu/*.py, each writing its JSON
  tests     pytest -m "not cuda", then pytest -m cuda (the whole suite between them)
  summary   bench/results/gpu/<kind>/summary.json from every stage file (always runs
            once CUDA is there), and copies for the device tool's $OUT

Why --target and PYTHONPATH, not a venv: the image's python3 is itself a venv
(/opt/torch/.venv); a venv made from it with --system-site-packages sees the base
interpreter's packages, not torch, and --user installs are refused inside a venv. A
--target folder leaves the image untouched and puts the carried wheels first on the path.
feedline itself is not installed: the repository root goes on PYTHONPATH and a `feedline`
command that runs `python -m feedline` goes on PATH.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import transport  # noqa: E402

STAGES = ("wheels", "install", "cuda", "data", "loader", "gpu_decode", "grid_splice", "prefetch", "resnet50", "ddp",
          "tests", "summary")  # the benchmarks before the tests: a call that runs out of time loses the tests,
                      # which a later call reruns anyway once DALI has arrived
ALWAYS = ("wheels", "install", "cuda", "summary")
BENCHES = {  # stage -> (script, JSON name, seconds allowed)
    "loader": ("loader_img_s.py", "loader_img_s.json", 240),
    "gpu_decode": ("gpu_decode.py", "gpu_decode.json", 180),
    "grid_splice": ("grid_splice.py", "grid_splice.json", 120),   # issue 24: spliced crops vs region decode
    "prefetch": ("prefetch_overlap.py", "prefetch_overlap.json", 90),
    "resnet50": ("resnet50.py", "resnet50.json", 300),
    "ddp": ("ddp.py", "ddp.json", 240),
}
IMPORTS = {"lmdb": "lmdb", "nvimgcodec": "nvidia.nvimgcodec", "dali": "nvidia.dali", "turbojpeg": "turbojpeg"}
LIB_DIR = "debs/usr/lib/x86_64-linux-gnu"   # where carried Debian packages' libraries land
NO_CUDA = 3


class NoCuda(Exception):
    pass


class Check:
    def __init__(self, work: Path, python: str, bundles: Path, deadline: float, photos: int = 10_000):
        self.work, self.python, self.bundles, self.deadline = work, python, bundles, deadline
        self.photos = photos
        self.stages = work / "stages"
        self.stages.mkdir(parents=True, exist_ok=True)
        self.site = work / "site"
        bin_dir = work / "bin"
        bin_dir.mkdir(exist_ok=True)
        shim = bin_dir / "feedline"  # the console script, without installing feedline
        shim.write_text(f'#!/bin/sh\nexec "{python}" -m feedline "$@"\n')
        shim.chmod(0o755)
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(self.site), str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
            LD_LIBRARY_PATH=os.pathsep.join(
                [str(work / LIB_DIR)] + [p for p in [os.environ.get("LD_LIBRARY_PATH")] if p]),
            PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONUNBUFFERED="1")

    # -- helpers ---------------------------------------------------------------------
    def save(self, name: str, result: dict) -> dict:
        (self.stages / f"{name}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
        return result

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def sh(self, cmd: list[str], timeout: float, log: Path | None = None) -> tuple[int, str]:
        """Run ``cmd`` in the repository with the check's environment; (exit code, output)."""
        timeout = max(10.0, min(timeout, self.left()))
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout)
            code, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            parts = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in (exc.stdout, exc.stderr) if x]
            code, out = 124, "".join(parts) + f"\nstopped after {timeout:.0f} s"
        if log is not None:
            log.write_text(out)
        return code, out

    def probe_json(self, code: str) -> dict:
        """The JSON object ``code`` prints last on stdout (libraries may print on stderr)."""
        try:
            proc = subprocess.run([self.python, "-c", code], cwd=REPO, env=self.env, capture_output=True,
                                  text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return {"error": "the probe did not finish in 120 s"}
        lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
        if proc.returncode != 0 or not lines:
            return {"error": (proc.stdout + proc.stderr)[-2000:], "returncode": proc.returncode}
        return json.loads(lines[-1])

    # -- stages ------------------------------------------------------------------------
    def wheels(self) -> dict:
        store = self.work / "parts"
        bundles = sorted(self.bundles.glob("bundle-*"))
        received, problems = transport.receive(bundles, store) if bundles else ([], [])
        if not (store / transport.MANIFEST).is_file():
            return self.save("wheels", {"ok": False, "reason": "no wheels received: run `make gpu-wheels` here and "
                                        "carry .whl/gpu/bundle-N (see .ci/gpu/README.md)"})
        report = transport.assemble(store, self.work / "wheels")
        return self.save("wheels", report | {"ok": not problems, "received_now": len(received), "problems": problems})

    def install(self, wheels: dict) -> dict:
        ready = sorted(row["path"] for row in wheels.get("wheels", {}).values()
                       if row.get("ok") and row["path"].endswith(".whl"))
        for deb in sorted(row["path"] for row in wheels.get("wheels", {}).values()
                          if row.get("ok") and row["path"].endswith(".deb")):
            rc, out = self.sh(["dpkg-deb", "-x", deb, str(self.work / "debs")], 60)  # unpacked, not installed
            if rc != 0:
                print(f"check: cannot unpack {deb}: {out[-500:]}", flush=True)
        marker = self.site / ".installed.json"
        if ready and not (marker.is_file() and json.loads(marker.read_text()) == ready):
            fresh = self.work / "site.new"
            shutil.rmtree(fresh, ignore_errors=True)
            rc, out = self.sh([self.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--disable-pip-version-check", "--target", str(fresh), *ready], 300)
            if rc != 0:
                return self.save("install", {"ok": False, "reason": f"pip install failed: {out[-2000:]}"})
            shutil.rmtree(self.site, ignore_errors=True)
            fresh.rename(self.site)
            marker.write_text(json.dumps(ready))
        code = ("import importlib, json; from importlib import metadata\nout = {}\n"
                f"for key, module in {IMPORTS!r}.items():\n"
                "    try:\n        m = importlib.import_module(module)\n"
                "        if key == 'turbojpeg': m.TurboJPEG()  # finds and loads libturbojpeg\n"
                "        out[key] = {'ok': True, 'version': getattr(m, '__version__', None)}\n"
                "    except Exception as exc:\n        out[key] = {'ok': False, 'error': f'{type(exc).__name__}: {exc}'}\n"
                "print(json.dumps(out))")
        imports = self.probe_json(code)
        return self.save("install", {"ok": bool(ready), "installed": [Path(p).name for p in ready],
                                     "site": str(self.site), "imports": imports})

    def cuda(self) -> dict:
        code = ("import json, os, platform, torch\nok = torch.cuda.is_available()\n"
                "cpu = next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), None)\n"
                "p = torch.cuda.get_device_properties(0) if ok else None\n"
                "tv = None\ntry:\n    import torchvision; tv = torchvision.__version__\nexcept Exception: pass\n"
                "print(json.dumps({'available': ok, 'torch': torch.__version__, 'torchvision': tv,\n"
                "  'cuda': torch.version.cuda, 'cudnn': torch.backends.cudnn.version(),\n"
                "  'device': torch.cuda.get_device_name(0) if ok else None,\n"
                "  'capability': list(torch.cuda.get_device_capability(0)) if ok else None,\n"
                "  'memory_gib': round(p.total_memory / 2**30, 1) if ok else None,\n"
                "  'cpu_cores': os.cpu_count(), 'cpu': cpu, 'python': platform.python_version()}))")
        info = self.probe_json(code)
        smi = shutil.which("nvidia-smi")
        if smi:
            rc, out = self.sh([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], 30)
            if rc == 0 and out.strip():
                info["smi_name"], info["driver"] = (s.strip() for s in out.strip().splitlines()[0].split(",", 1))
        self.save("cuda", info)
        if not info.get("available"):
            raise NoCuda(info.get("error") or "torch.cuda.is_available() is False")
        return info

    def data(self) -> dict:
        path = self.stages / "data.json"
        if path.is_file() and Path(json.loads(path.read_text()).get("packed", "/nonexistent")).exists():
            return json.loads(path.read_text())
        rc, out = self.sh([self.python, "bench/gpu/photos.py", "--n", str(self.photos), "--out",
                           str(self.work / "data")], 400)
        if rc != 0:
            return self.save("data", {"ok": False, "reason": out[-2000:]})
        line = [x for x in out.splitlines() if x.startswith("{")][-1]   # its JSON line, whatever was logged
        return self.save("data", json.loads(line) | {"ok": True})

    def tests(self) -> dict:
        t0, runs = time.monotonic(), {}
        for name, marker, seconds in (("suite_not_cuda", "not cuda", 300), ("cuda", "cuda", 300)):
            junit = self.stages / f"junit-{name}.xml"
            rc, out = self.sh([self.python, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "-m", marker,
                               f"--junitxml={junit}"], seconds, log=self.stages / f"pytest-{name}.log")
            runs[name] = junit_counts(junit) | {"returncode": rc, "tail": out[-1500:]}
        return self.save("tests", {"ok": all(r["returncode"] in (0, 5) for r in runs.values()), "runs": runs,
                                   "seconds": round(time.monotonic() - t0, 1)})

    def bench(self, stage: str, data: dict) -> dict:
        script, out_name, seconds = BENCHES[stage]
        out = self.work / "results" / out_name
        out.parent.mkdir(exist_ok=True)
        cmd = [self.python, f"bench/gpu/{script}", "--out", str(out)]
        if stage != "prefetch":
            cmd += ["--data", data["packed"]]
        if stage == "loader":
            cmd += ["--folder", data["folder"]]
        t0 = time.monotonic()
        rc, output = self.sh(cmd, seconds, log=self.stages / f"bench-{stage}.log")
        return self.save(f"bench-{stage}", {"ok": rc == 0 and out.is_file(), "returncode": rc, "json": str(out),
                                            "seconds": round(time.monotonic() - t0, 1), "tail": output[-1500:]})


def junit_counts(path: Path) -> dict:
    """tests_passed, tests_failed (failures and errors), tests_skipped from a JUnit XML."""
    if not path.is_file():
        return {"tests_passed": 0, "tests_failed": None, "tests_skipped": None}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    return {"tests_passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "tests_failed": total["failures"] + total["errors"], "tests_skipped": total["skipped"],
            "seconds": sum(float(s.get("time", 0)) for s in suites)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated stages to run besides wheels, install, cuda and summary "
                                  f"(default: all of {', '.join(s for s in STAGES if s not in ALWAYS)})")
    p.add_argument("--photos", type=int, default=10_000, help="images of the benchmarks' data set")
    p.add_argument("--budget-s", type=float, default=570.0,
                   help="stop starting stages after this many seconds (a device call allows 600)")
    a = p.parse_args(argv)
    chosen = set(STAGES) if a.only is None else set(ALWAYS) | {s.strip() for s in a.only.split(",") if s.strip()}
    unknown = chosen - set(STAGES)
    if unknown:
        p.error(f"unknown stage {sorted(unknown)[0]!r}; stages: {', '.join(STAGES)}")
    work = Path(os.environ.get("FEEDLINE_GPU_WORK", "/var/tmp/feedline-gpu"))
    bundles = Path(os.environ.get("GPU_WHEELS_OUT", REPO / ".whl" / "gpu"))
    check = Check(work, sys.executable, bundles, time.monotonic() + a.budget_s, a.photos)
    started = time.monotonic()
    wheels = check.wheels()
    print(f"check: wheels: {sum(r['ok'] for r in wheels.get('wheels', {}).values())} ready"
          + ("" if wheels["ok"] else f" ({wheels.get('reason') or wheels.get('problems')})"), flush=True)
    install = check.install(wheels)
    print(f"check: install into {check.site}: imports {json.dumps(install.get('imports'))}", flush=True)
    try:
        info = check.cuda()
    except NoCuda as exc:
        done = (f"{len(install.get('installed', []))} wheels checked and installed into {check.site}"
                if install.get("ok") else "no wheels installed")
        print(f"check: STOP: no CUDA device here ({exc}); {done}. The stages data, tests, benchmarks and "
              "summary need the GPU machine: see .ci/gpu/README.md", file=sys.stderr)
        return NO_CUDA
    print(f"check: {info.get('device')}, driver {info.get('driver')}, CUDA {info.get('cuda')}, "
          f"torch {info.get('torch')}, {info.get('cpu_cores')} cores", flush=True)
    import summary  # after the CUDA stage: it is the part that needs a GPU run's results
    try:
        data = check.data() if chosen & ({"data"} | set(BENCHES)) else {}
        for stage in [s for s in STAGES if s in chosen and s not in ALWAYS and s != "data"]:
            if check.left() < 30:
                check.save(stage if stage == "tests" else f"bench-{stage}", {"ok": False, "reason": "out of time"})
                continue
            if stage == "tests":
                check.tests()
            elif data.get("ok"):
                check.bench(stage, data)
            else:
                check.save(f"bench-{stage}", {"ok": False, "reason": f"no data set: {data.get('reason')}"})
            print(f"check: {stage} done at {time.monotonic() - started:.0f} s", flush=True)
    finally:
        path = summary.write(check.stages, REPO, info, copy_to=os.environ.get("OUT"))  # $OUT: the device tool's
        print(f"check: wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
