"""summary.json of the GPU check, from its stage files (.ci/gpu/check.py writes one per
stage, WORK/stages/<call>.<stage>.json): the plan, every stage's status (crashed ones with
their signal and last lines), the machine, the tests, every figure, each target met or not
and why. Rewritten after every stage, with the results folder
(bench/results/gpu/<kind>/: summary.json, the benchmarks' JSON, the logs' last lines) as
one .tar.gz, into the device tool's $OUT, so a call stopped at its limit returns what
finished.

    python .ci/gpu/summary.py bench/results/gpu/h100/summary.json   # the README's table
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import tarfile
from datetime import datetime, timezone
from pathlib import Path

BENCH_FILES = {"loader": "loader_img_s.json", "gpu_whole_decode": "gpu_decode.json",
               "prefetch": "prefetch_overlap.json", "resnet50": "resnet50.json", "grid_splice": "grid_splice.json",
               "dali_decode": "gpu_decode_dali.json"}
STAGE_FIELDS = ("status", "signal", "cap_s", "seconds", "at_s", "reason", "returncode", "tail", "passed", "failed",
                "skipped", "crashed", "timed_out", "running_when_stopped", "set", "orphans_killed", "abandoned",
                "py_spy")
LOG_TAIL = 64 * 1024   # bytes of each log kept in the results
CONSUMER_GIL_MS = 0.02   # bench/scaling.py's consumer target: a ceiling of 50,000 img/s
RESNET_STEPS = 60        # timed steps after the warm-up, real and synthetic each


def kind_of(device: str | None) -> str:
    """'h100' or 'h200' from the GPU's name; another GPU gets a slug of its name."""
    name = (device or "unknown").lower()
    for kind in ("h200", "h100"):
        if kind in name:
            return kind
    return re.sub(r"[^a-z0-9]+", "-", name.replace("nvidia", "")).strip("-") or "unknown"


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _target(check: str, measured, needed: float, why_missed: str | None, unit: str = "x") -> dict:
    passed = None if measured is None else measured >= needed
    row = {"check": check, "measured": measured, "target": f">= {needed:g}{unit}", "passed": passed}
    if passed is not True:
        row["why"] = why_missed or ("not measured" if measured is None else None)
    return row


def _stage_files(stages: Path) -> dict[str, dict]:
    """'<call>.<stage>' -> its stage file, in the order the stages ran."""
    files = {p.stem: _load(p) for p in stages.glob("*.json") if not p.stem.endswith(".plan")}
    return dict(sorted(files.items(), key=lambda kv: (kv[0].split(".")[0] != "core", kv[1].get("order", 0))))


def compose(stages: Path, results: Path) -> tuple[dict, Path]:
    """The summary, and the results folder it belongs in (results/bench/results/gpu/<kind>)."""
    ran = _stage_files(stages)
    info = ran.get("core.smoke") or ran.get("dali.smoke") or {}
    kind = kind_of(info.get("device"))
    out_dir = results / "bench" / "results" / "gpu" / kind
    out_dir.mkdir(parents=True, exist_ok=True)
    benches, paths = {}, {}
    for stage, name in BENCH_FILES.items():
        result = ran.get(f"{'dali' if stage.startswith('dali') else 'core'}.{stage}", {})
        src = Path(result.get("json") or "/nonexistent")
        if src.is_file():
            shutil.copy2(src, out_dir / name)
            benches[stage] = _load(out_dir / name)
            paths[name.removesuffix(".json")] = f"bench/results/gpu/{kind}/{name}"
    loader, decode, prefetch, resnet, splice, dali_decode = (benches.get(s, {}) for s in BENCH_FILES)
    gil = loader.get("gil") or {}
    setup = ran.get("core.setup", {})
    dali_setup = ran.get("dali.setup", {})
    dali = dali_setup.get("imports", {}).get("dali", {})
    runs = {k.split(".", 1)[1]: {f: v.get(f) for f in ("status", "reason", "passed", "failed", "skipped", "crashed",
                                                         "timed_out", "running_when_stopped", "files")}
            for k, v in ran.items() if k in ("core.cuda_tests", "dali.dali_tests")}
    figures = {
        "loader_img_s": loader.get("loader_img_s"), "loader_engine": loader.get("engine"),
        "torchvision_img_s": loader.get("torchvision_img_s"),
        "loader_consumer_gil_ms_per_image": gil.get("consumer_gil_ms_per_image"),
        "loader_worker_gil_ms_per_own_image": gil.get("worker_gil_ms_per_own_image"),
        "loader_gil_per_worker": gil.get("per_worker"), "loader_gil_reason": gil.get("reason"),
        "default_engine_img_s": decode.get("default_engine_img_s"),
        "gpu_decode_img_s": decode.get("gpu_img_s"), "gpu_decode_mode": decode.get("gpu_mode"),
        "dali_mixed_img_s": dali_decode.get("dali_mixed_img_s"),
        "fastest_nvimgcodec_backend": decode.get("fastest_backend"),
        "nvimgcodec_backends": decode.get("backends"), "prefetch_overlap": prefetch.get("hidden_fraction"),
        "prefetch_copy_ms": prefetch.get("copy_ms"), "resnet50_real_img_s": resnet.get("real_images_per_s"),
        "resnet50_synthetic_img_s": resnet.get("synthetic_images_per_s"),
        "resnet50_real_over_synthetic": resnet.get("resnet50_real_over_synthetic"),
        "resnet50_timed_steps": resnet.get("timed_steps"),
        "grid_splice_x_region": splice.get("splice_x_region"), "grid_splice_backend": splice.get("splice_backend"),
        "grid_splice_originals_by": splice.get("originals_by"),
        "region_decode_safe": info.get("region_decode_safe"),
    }
    rows = {r.get("name"): r for r in decode.get("results", [])}
    dali_rows = {r.get("name"): r for r in dali_decode.get("results", [])}
    default = figures["default_engine_img_s"] or dali_decode.get("default_engine_img_s")
    steps = figures["resnet50_timed_steps"]
    targets = [
        _target("loader_img_s: FeedLoader's default engine (16 worker processes), RRC 224 + flip, bf16 "
                "channels_last on the GPU", figures["loader_img_s"], 10_000,
                loader.get("diagnosis") or _stage_reason(ran, "core.loader"), " img/s"),
        _at_most("loader_consumer_gil_ms_per_image: the training process's GIL per image, 16 workers (py-spy)",
                 figures["loader_consumer_gil_ms_per_image"], CONSUMER_GIL_MS,
                 figures["loader_gil_reason"] or _stage_reason(ran, "core.loader"), " ms"),
        _target(f"gpu_decode_img_s / the default engine's img/s: engine='gpu' "
                f"({figures['gpu_decode_mode'] or 'whole image + GPU crop on nvImageCodec 0.9.x'})",
                _ratio(figures["gpu_decode_img_s"], default), 1.0,
                rows.get("gpu", {}).get("reason") or _stage_reason(ran, "core.gpu_whole_decode")),
        _target("dali_mixed_img_s / the default engine's img/s", _ratio(figures["dali_mixed_img_s"], default), 1.0,
                dali_rows.get("dali", {}).get("reason") or dali.get("error") or _stage_reason(ran, "dali.dali_decode")),
        _target("prefetch_overlap: share of the copy hidden behind the step", figures["prefetch_overlap"], 0.9,
                _stage_reason(ran, "core.prefetch"), ""),
        _target(f"resnet50_real_over_synthetic: ResNet-50 bf16, >= {RESNET_STEPS} timed steps each (here {steps})",
                figures["resnet50_real_over_synthetic"] if (steps or 0) >= RESNET_STEPS else None, 0.95,
                resnet.get("diagnosis") or resnet.get("error") or _stage_reason(ran, "core.resnet50")
                or (f"only {steps} timed steps" if steps is not None else None), ""),
    ]
    cuda = runs.get("cuda_tests", {})
    targets.append({"check": "tests: pytest -m 'cuda and not dali' on the GPU, no failure, no crash",
                    "measured": cuda.get("failed"),
                    "target": "0 failed, none crashed, some passed",
                    "passed": (cuda.get("status") == "ok" and (cuda.get("passed") or 0) > 0)
                    if cuda.get("status") not in (None, "skipped") else None,
                    **({} if cuda.get("status") == "ok" and cuda.get("passed") else {"why": _tests_why(cuda)})})
    summary = {
        "kind": kind, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": info.get("device"), "gpus": info.get("gpus"), "capability": info.get("capability"),
        "memory_gib": info.get("memory_gib"), "cuda": info.get("cuda"), "torch": info.get("torch"),
        "nvimgcodec": info.get("nvimgcodec"), "cpu_cores": info.get("cpu_cores"),
        "smoke": {k: info.get(k) for k in ("available", "full_decode_ok", "full_decode_diffs", "region",
                                             "dali_slice", "region_decode_safe", "rule", "error")},
        "installed": setup.get("imports"),
        "dali": {"installed": bool(dali.get("ok")), "version": dali.get("version"),
                 "reason": None if dali.get("ok") else (dali.get("error") or "the optional DALI call did not run")},
        "tests": runs, "figures": figures, "targets": targets,
        "profile": {"per_batch_of_256_ms": _budget(figures),
                    "loader": loader.get("profile"), "loader_diagnosis": loader.get("diagnosis"),
                    "resnet50_epochs": [{k: e.get(k) for k in ("epoch", "images_per_s", "data_wait", "epoch_s")}
                                        for e in resnet.get("epochs", [])],
                    "resnet50_diagnosis": resnet.get("diagnosis")},
        "benchmarks": paths,
        "plans": {p.stem: _load(p) for p in sorted(stages.glob("*.plan.json"))},
        "stages": {k: {f: v[f] for f in STAGE_FIELDS if v.get(f) not in (None, [], "")} for k, v in ran.items()},
    }
    return summary, out_dir


def _tests_why(run: dict) -> str:
    if not run:
        return "not run"
    if run.get("reason"):   # skipped (no CUDA device), out of time
        return f"{run.get('status')}: {run['reason']}"
    bad = [f"{r['file']}: {r['status']}" + (f" ({r['signal']})" if r.get("signal") else "")
           + (f" in {r['running_when_stopped']}" if r.get("running_when_stopped") else "")
           for r in run.get("files", []) if r.get("status") not in ("ok", "no tests")]
    return "; ".join(bad) or ("no test passed (all skipped?)" if not run.get("passed") else run.get("status", "?"))


def _budget(figures: dict) -> dict:
    """Where a batch of 256 spends its time, each stage measured alone: the loader with its 16
    worker processes, the copy + normalization on the GPU, the ResNet-50 step on synthetic data. The
    slowest sets the pace of training; the copy overlaps the step (prefetch_overlap)."""
    def ms(rate):
        return 256e3 / rate if rate else None
    return {"loader": ms(figures["loader_img_s"]), "copy_normalize": figures["prefetch_copy_ms"],
            "resnet50_step": ms(figures["resnet50_synthetic_img_s"])}


def _at_most(check: str, measured, bound: float, why_missed: str | None, unit: str) -> dict:
    passed = None if measured is None else measured <= bound
    row = {"check": check, "measured": measured, "target": f"<= {bound:g}{unit}", "passed": passed}
    if passed is not True:
        row["why"] = why_missed or ("not measured" if measured is None else None)
    return row


def _ratio(a, b):
    return a / b if a and b else None


def _stage_reason(ran: dict, key: str) -> str | None:
    result = ran.get(key)
    if not result:
        return "not run"
    if result.get("status") == "ok":
        return None
    why = result.get("status", "?") + (f" ({result['signal']})" if result.get("signal") else "")
    return why + ": " + (result.get("reason") or (result.get("tail") or "")[-300:])


def table(summary: dict) -> str:
    lines = [f"{summary['device']} ({summary['gpus']} GPU, CUDA {summary['cuda']}, torch {summary['torch']}, "
             f"nvImageCodec {summary['nvimgcodec']}), {summary['date']}"]
    for name, stage in summary["stages"].items():
        lines.append(f"  stage {name:18} {stage.get('status', '?'):12} {stage.get('seconds', 0):6.0f} s "
                     f"of {stage.get('cap_s', 0):.0f}" + (f"  [{stage['signal']}]" if stage.get("signal") else ""))
    for t in summary["targets"]:
        result = {True: "pass", False: "MISSED", None: "not measured"}[t["passed"]]
        measured = t["measured"]
        shown = f"{measured:,.3f}" if isinstance(measured, float) else str(measured)
        lines.append(f"  {result:12} {t['check']}: {shown} (needed {t['target']})"
                     + (f"\n               why: {t['why']}" if t.get("why") else ""))
    return "\n".join(lines)


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write(stages: Path, logs: Path, results: Path, copy_to: Path | None = None) -> Path:
    """Write summary.json into the results folder, with the benchmarks' JSON and the logs'
    last lines; with ``copy_to`` (the device tool's $OUT) also summary.json and
    gpu-results.tar.gz (bench/results/gpu/<kind>/, to unpack in the repository) there."""
    summary, out_dir = compose(stages, results)
    (out_dir / "logs").mkdir(exist_ok=True)
    for log in sorted(logs.glob("*.log")):
        data = log.read_bytes()[-LOG_TAIL:]
        (out_dir / "logs" / log.name).write_bytes(data)
    path = out_dir / "summary.json"
    text = json.dumps(summary, indent=1, default=str) + "\n"
    atomic_write(path, text)
    if copy_to is not None and copy_to.is_dir():
        atomic_write(copy_to / "summary.json", text)
        tmp = copy_to / "gpu-results.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(out_dir, arcname=f"bench/results/gpu/{summary['kind']}")
        tmp.replace(copy_to / "gpu-results.tar.gz")
    return path


def kept_stages(previous: Path, stages: Path, call: str, names: list[str]) -> dict[str, dict]:
    """--only-failed: stage -> its result, for the stages of ``names`` that ended ok in the
    summary ``previous`` and whose stage file in ``stages`` still says so (setup is never
    kept: it is quick once installed, and it checks what this call carried)."""
    try:
        ended = json.loads(previous.read_text()).get("stages", {})
    except (OSError, ValueError) as exc:
        print(f"check: --only-failed: cannot read {previous} ({exc}); running every stage", flush=True)
        return {}
    kept = {}
    for name in names:
        path = stages / f"{call}.{name}.json"
        if name != "setup" and ended.get(f"{call}.{name}", {}).get("status") == "ok" and path.is_file():
            result = _load(path)
            if result.get("status") == "ok":
                kept[name] = result
    return kept


def markdown(summary: dict) -> str:
    """The README's "Measured on a GPU" table: each target, its figure and whether it was met."""
    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
        return "-" if value is None else str(value)
    f = summary["figures"]
    lines = [f"Measured on {summary['device']} ({summary['gpus']} GPU, CUDA {summary['cuda']}, torch {summary['torch']}, "
             f"nvImageCodec {summary['nvimgcodec']}), {summary['date'][:10]}:", "",
             "| what | measured | target | met |", "| --- | --- | --- | --- |"]
    for t in summary["targets"]:
        met = {True: "yes", False: "**no**", None: "not measured"}[t["passed"]]
        lines.append(f"| {t['check']} | {cell(t['measured'])} | {t['target']} | {met} |")
    lines += ["", "| figure | value |", "| --- | --- |"]
    lines += [f"| {k} | {cell(v)} |" for k, v in f.items() if not isinstance(v, (list, dict))]
    missed = [t for t in summary["targets"] if t["passed"] is not True and t.get("why")]
    if missed:
        lines += ["", "What fell short:", ""] + [f"- {t['check']}: {t['why']}" for t in missed]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(json.loads(Path(sys.argv[1]).read_text())))
