"""bench/results/gpu/<kind>/summary.json from the stage files of .ci/gpu/check.py: the
machine, the tests, every figure, each target met or not and why, and where the
per-benchmark JSON files are. Also a table for people, and copies for the device tool's
$OUT (at most 8 files come back from a call: summary.json and one .tar.gz of the folder).

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

BENCH_FILES = {"loader": "loader_img_s.json", "gpu_decode": "gpu_decode.json", "prefetch": "prefetch_overlap.json",
               "resnet50": "resnet50.json", "ddp": "ddp.json", "grid_splice": "grid_splice.json"}


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


def compose(stages: Path, repo: Path, info: dict) -> tuple[dict, Path]:
    kind = kind_of(info.get("device"))
    out_dir = repo / "bench" / "results" / "gpu" / kind
    out_dir.mkdir(parents=True, exist_ok=True)
    benches, paths = {}, {}
    for stage, name in BENCH_FILES.items():
        result = _load(stages / f"bench-{stage}.json")
        src = Path(result.get("json", "/nonexistent"))
        if src.is_file():
            shutil.copy2(src, out_dir / name)
            benches[stage] = _load(out_dir / name)
            paths[name.removesuffix(".json")] = str((out_dir / name).relative_to(repo))
    for log in stages.glob("pytest-*.log"):
        shutil.copy2(log, out_dir / log.name)
    loader, decode, prefetch, resnet, ddp, splice = (benches.get(s, {}) for s in BENCH_FILES)
    install, tests, wheels = _load(stages / "install.json"), _load(stages / "tests.json"), _load(stages / "wheels.json")
    runs = tests.get("runs", {})
    dali = install.get("imports", {}).get("dali", {})
    missing_dali = wheels.get("groups", {}).get("dali", {}).get("missing")
    figures = {
        "loader_img_s": loader.get("loader_img_s"), "torchvision_img_s": loader.get("torchvision_img_s"),
        "torchvision_uint8_img_s": loader.get("torchvision_uint8_img_s"),
        "cpu_threads_img_s": decode.get("cpu_threads_img_s"), "gpu_decode_img_s": decode.get("gpu_decode_img_s"),
        "dali_mixed_img_s": decode.get("dali_mixed_img_s"), "fastest_nvimgcodec_backend": decode.get("fastest_backend"),
        "nvimgcodec_backends": decode.get("backends"), "prefetch_overlap": prefetch.get("hidden_fraction"),
        "prefetch_copy_ms": prefetch.get("copy_ms"), "resnet50_real_img_s": resnet.get("real_images_per_s"),
        "resnet50_synthetic_img_s": resnet.get("synthetic_images_per_s"),
        "resnet50_real_over_synthetic": resnet.get("resnet50_real_over_synthetic"), "ddp_ok": ddp.get("ddp_ok"),
        "grid_splice_x_region": splice.get("splice_x_region"), "grid_splice_backend": splice.get("splice_backend"),
    }
    rows = {r.get("name"): r for r in decode.get("results", [])}
    cpu = figures["cpu_threads_img_s"]
    targets = [
        _target("loader_img_s: FeedLoader, RRC 224 + flip, bf16 channels_last on the GPU, 16 threads",
                figures["loader_img_s"], 10_000, loader.get("diagnosis") or _stage_reason(stages, "loader"), " img/s"),
        _target("gpu_decode_img_s / CPU threads' img/s", _ratio(figures["gpu_decode_img_s"], cpu), 1.5,
                rows.get("gpu", {}).get("reason") or _stage_reason(stages, "gpu_decode")),
        _target("dali_mixed_img_s / CPU threads' img/s", _ratio(figures["dali_mixed_img_s"], cpu), 1.5,
                rows.get("dali", {}).get("reason") or dali.get("error") or _stage_reason(stages, "gpu_decode")),
        _target("resnet50_real_over_synthetic", figures["resnet50_real_over_synthetic"], 0.95,
                resnet.get("diagnosis") or resnet.get("error") or _stage_reason(stages, "resnet50"), ""),
        {"check": "DDP: torchrun --nproc_per_node=1 starts (NCCL), trains, checkpoints", "measured": figures["ddp_ok"],
         "target": "true", "passed": figures["ddp_ok"],
         **({} if figures["ddp_ok"] else {"why": _stage_reason(stages, "ddp") or "see ddp.json"})},
    ]
    failed = sum(r.get("tests_failed") or 0 for r in runs.values())
    targets.append({"check": "tests: whole suite on the GPU machine, no failure", "measured": failed,
                    "target": "0 failed", "passed": bool(runs) and failed == 0 and all(
                        r.get("tests_failed") is not None for r in runs.values())})
    summary = {
        "kind": kind, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": info.get("device"), "driver": info.get("driver"), "cuda": info.get("cuda"),
        "torch": info.get("torch"), "torchvision": info.get("torchvision"), "cudnn": info.get("cudnn"),
        "capability": info.get("capability"), "memory_gib": info.get("memory_gib"), "cpu_cores": info.get("cpu_cores"),
        "cpu": info.get("cpu"), "python": info.get("python"),
        "installed": install.get("imports"),
        "dali": {"installed": bool(dali.get("ok")), "version": dali.get("version"),
                 "reason": None if dali.get("ok") else (
                     f"wheels not all received ({', '.join(missing_dali)}); carry the remaining bundles"
                     if missing_dali else dali.get("error"))},
        "tests": {**runs, "tests_passed": sum(r.get("tests_passed") or 0 for r in runs.values()),
                  "tests_failed": failed},
        "figures": figures, "targets": targets,
        "profile": {"per_batch_of_256_ms": _budget(figures),
                    "loader": loader.get("profile"), "loader_diagnosis": loader.get("diagnosis"),
                    "resnet50_epochs": [{k: e.get(k) for k in ("epoch", "images_per_s", "data_wait", "epoch_s")}
                                        for e in resnet.get("epochs", [])],
                    "resnet50_diagnosis": resnet.get("diagnosis")},
        "benchmarks": paths,
        "stages": {p.stem: {k: v for k, v in _load(p).items() if k in ("ok", "seconds", "reason", "returncode")}
                   for p in sorted(stages.glob("*.json"))},
    }
    return summary, out_dir


def _budget(figures: dict) -> dict:
    """Where a batch of 256 spends its time, each stage measured alone: the loader on its 16
    threads, the copy + normalization on the GPU, the ResNet-50 step on synthetic data. The
    slowest sets the pace of training; the copy overlaps the step (prefetch_overlap)."""
    def ms(rate):
        return 256e3 / rate if rate else None
    return {"loader": ms(figures["loader_img_s"]), "copy_normalize": figures["prefetch_copy_ms"],
            "resnet50_step": ms(figures["resnet50_synthetic_img_s"])}


def _ratio(a, b):
    return a / b if a and b else None


def _stage_reason(stages: Path, stage: str) -> str | None:
    result = _load(stages / f"bench-{stage}.json")
    if not result:
        return "not run"
    if result.get("ok"):
        return None
    return result.get("reason") or f"exit {result.get('returncode')}: {(result.get('tail') or '')[-300:]}"


def table(summary: dict) -> str:
    lines = [f"{summary['device']} (driver {summary['driver']}, CUDA {summary['cuda']}, torch {summary['torch']}, "
             f"{summary['cpu_cores']} cores), {summary['date']}"]
    for t in summary["targets"]:
        result = {True: "pass", False: "MISSED", None: "not measured"}[t["passed"]]
        measured = t["measured"]
        shown = f"{measured:,.3f}" if isinstance(measured, float) else str(measured)
        lines.append(f"  {result:12} {t['check']}: {shown} (needed {t['target']})"
                     + (f"\n               why: {t['why']}" if t.get("why") else ""))
    tests = summary["tests"]
    lines.append(f"  tests: {tests['tests_passed']} passed, {tests['tests_failed']} failed "
                 + " ".join(f"[{k}: {v.get('tests_passed')} passed, {v.get('tests_failed')} failed, "
                            f"{v.get('tests_skipped')} skipped]" for k, v in tests.items() if isinstance(v, dict)))
    return "\n".join(lines)


def write(stages: Path, repo: Path, info: dict, copy_to: str | None = None) -> Path:
    """Write summary.json and print its table; with ``copy_to`` (the device tool's $OUT,
    whose files come back from the call) also a copy and a .tar.gz of the results folder."""
    summary, out_dir = compose(stages, repo, info)
    path = out_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(table(summary), flush=True)
    if copy_to and Path(copy_to).is_dir():
        shutil.copy2(path, Path(copy_to) / "summary.json")
        with tarfile.open(Path(copy_to) / f"gpu-results-{summary['kind']}.tar.gz", "w:gz") as tar:
            tar.add(out_dir, arcname=str(out_dir.relative_to(repo)))
    return path


def markdown(summary: dict) -> str:
    """The README's "Measured on a GPU" table: each target, its figure and whether it was met."""
    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
        return "-" if value is None else str(value)
    f = summary["figures"]
    lines = [f"Measured on {summary['device']} ({summary['cpu_cores']} CPU cores, driver {summary['driver']}, "
             f"CUDA {summary['cuda']}, torch {summary['torch']}), {summary['date'][:10]}:", "",
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
