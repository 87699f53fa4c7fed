"""The GPU check's setup stage: the carried parts checked and the wheels rebuilt
(transport.py), Debian packages unpacked, the call's group of wheels installed with
`pip install --no-index --no-deps --target`, and an import of each.

Why --target and PYTHONPATH, not a venv: the image's python3 is itself a venv
(/opt/torch/.venv); a venv made from it would not see its torch, and --user installs are
refused inside a venv. A --target folder (site for the core group, site-dali for DALI's)
leaves the image untouched and puts the carried wheels first on the path. Its
nvidia/__init__.py is written as the pkgutil namespace form, so the image's own nvidia.*
packages (cuDNN, NCCL, ...) still import; the import probe checks that.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import transport

IMPORTS = {"core": {"lmdb": "lmdb", "simplejpeg": "simplejpeg", "nvimgcodec": "nvidia.nvimgcodec",
                    "turbojpeg": "turbojpeg", "xxhash": "xxhash"},
           "dali": {"dali": "nvidia.dali", "nvimgcodec": "nvidia.nvimgcodec"}}
LIB_DIR = "debs/usr/lib/x86_64-linux-gnu"   # where carried Debian packages' libraries land
NAMESPACE = "__path__ = __import__('pkgutil').extend_path(__path__, __name__)\n"


def setup(check, cap_s: float) -> dict:
    """The setup stage of ``check`` (a check.Check): its call's group of wheels installed."""
    end = time.monotonic() + cap_s
    store = check.work / "parts"
    bundles = sorted(check.bundles.glob("bundle-*"))
    received, problems = transport.receive(bundles, store) if bundles else ([], [])
    if not (store / transport.MANIFEST).is_file():
        return {"status": "failed", "reason": "no wheels received: run `make gpu-wheels` here and carry "
                ".whl/gpu/bundle-N (see .ci/gpu/README.md)", "problems": problems}
    report = transport.assemble(store, check.work / "wheels")
    mine = [r for r in report["wheels"].values() if r["group"] == check.call and r.get("ok")]
    ready = sorted(r["path"] for r in mine if r["path"].endswith(".whl"))
    debs = sorted(r["path"] for r in mine if r["path"].endswith(".deb"))
    result = {"received_now": len(received), "problems": problems, "groups": report["groups"],
              "missing": sorted(f for f, r in report["wheels"].items() if not r["ok"])}
    for deb in debs:   # unpacked, not installed: only its library is used, through LD_LIBRARY_PATH
        outcome = check.run(["dpkg-deb", "-x", deb, str(check.work / "debs")], 30, check.logs / "dpkg.log")
        if outcome.status != "ok":
            problems.append(f"cannot unpack {Path(deb).name}: {outcome.status}: {outcome.tail[-300:]}")
    marker = check.site / ".installed.json"
    if ready and not (marker.is_file() and json.loads(marker.read_text()) == ready):
        fresh = check.work / "site.new"
        shutil.rmtree(fresh, ignore_errors=True)
        outcome = check.run([check.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                             "--disable-pip-version-check", "--target", str(fresh), *ready],
                            max(5.0, end - time.monotonic() - 5), check.logs / f"{check.call}.pip.log")
        if outcome.status != "ok":
            print(f"check: pip install FAILED ({outcome.status}):\n{outcome.tail}", flush=True)
            return result | {"status": "failed", "reason": f"pip install {outcome.status}", "tail": outcome.tail}
        keep_namespace(fresh)
        shutil.rmtree(check.site, ignore_errors=True)
        fresh.rename(check.site)
        marker.write_text(json.dumps(ready))
    code = ("import importlib, json\nout = {}\n"
            f"for key, module in {IMPORTS[check.call]!r}.items():\n"
            "    try:\n        m = importlib.import_module(module)\n"
            "        if key == 'turbojpeg': m.TurboJPEG()  # finds and loads libturbojpeg\n"
            "        out[key] = {'ok': True, 'version': getattr(m, '__version__', None), 'file': m.__file__}\n"
            "    except Exception as exc:\n        out[key] = {'ok': False, 'error': f'{type(exc).__name__}: {exc}'}\n"
            "import os, sys, nvidia\nout['nvidia_path'] = list(nvidia.__path__)\n"
            "every = [os.path.join(p, 'nvidia') for p in sys.path if os.path.isdir(os.path.join(p, 'nvidia'))]\n"
            "out['nvidia_namespace'] = {'ok': all(p in nvidia.__path__ for p in every), 'missing': "
            "[p for p in every if p not in nvidia.__path__]}\nprint(json.dumps(out))")
    imports = probe_json(check, code, max(5.0, end - time.monotonic()), "imports")
    bad = [k for k, v in imports.items() if isinstance(v, dict) and not v.get("ok")]
    spy = check.site / "bin" / "py-spy"   # GIL figures (bench/scaling.py); a stage that lacks it says so
    if spy.is_file():
        outcome = check.run([str(spy), "--version"], 10, check.logs / f"{check.call}.py-spy.log")
        result["py_spy"] = outcome.tail.strip()[-80:] if outcome.status == "ok" else \
            f"{outcome.status}: {outcome.tail[-200:]}"
    print(f"check: installed {len(ready)} wheels into {check.site}; imports: "
          + ("all ok" if not bad and "error" not in imports else f"FAILED {bad or imports.get('error')}"), flush=True)
    return result | {"status": "ok" if ready and not bad and "error" not in imports and not problems else "failed",
                     "installed": [Path(p).name for p in ready], "imports": imports}


def probe_json(check, code: str, cap_s: float, name: str) -> dict:
    """The JSON object ``code`` prints last on stdout, or what went wrong."""
    outcome = check.run([check.python, "-c", code], cap_s, check.logs / f"{check.call}.{name}.log")
    lines = [x for x in (check.logs / f"{check.call}.{name}.log").read_text(errors="replace").splitlines()
             if x.startswith("{")]
    if outcome.status != "ok" or not lines:
        return {"error": f"{outcome.status}: {outcome.tail[-1500:]}", "status": outcome.status}
    return json.loads(lines[-1])


def keep_namespace(site: Path) -> None:
    """nvImageCodec's nvidia/__init__.py extends the package's path (pkgutil) so that the
    image's own nvidia.* modules import; nvJPEG2000's and nvTIFF's are empty and, installed
    after it, would replace it. Written last, whatever the order of installation was."""
    init = site / "nvidia" / "__init__.py"
    if init.parent.is_dir():
        init.write_text(NAMESPACE)
