"""The GPU check's parts that run without a GPU: carrying wheels in bundles (.ci/gpu/
bundle.py here, transport.py there), choosing them (closure.py), the check up to its CUDA
stage (check.sh), and the summary's targets (summary.py). Tiny real wheels made here; no
network."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GPU_CI = REPO / ".ci" / "gpu"
sys.path.insert(0, str(GPU_CI))
import bundle  # noqa: E402
import closure  # noqa: E402
import plan  # noqa: E402
import summary  # noqa: E402
import transport  # noqa: E402

KIB = 1024


def source_text(lines: int, seed: int) -> bytes:
    """Python source with a table of digests: compresses about as well as the libraries in
    real wheels do (to about half), so the xz form still spans several parts."""
    return "".join(f"KEY_{seed}_{i} = '{hashlib.sha256(f'{seed}-{i}'.encode()).hexdigest()}'\n"
                   for i in range(lines)).encode()


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes], requires=()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires) + "\n")
    members = dict(files) | {f"{dist}.dist-info/METADATA": meta.encode(),
                             f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\n"
                                                        b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{arc},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for arc, data in members.items()) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in members.items():
            zf.writestr(arc, data)
        zf.writestr(f"{dist}.dist-info/RECORD", record)
    return path


@pytest.fixture
def wheels(tmp_path):
    """A core group (one small wheel that installs a module) and a dali group (one wheel
    large enough to be compressed and cut into several parts)."""
    core = make_wheel(tmp_path / "dl" / "core", "fl-gpu-probe", "1.0",
                      {"fl_gpu_probe/__init__.py": b"VALUE = 42\n"})
    big = make_wheel(tmp_path / "dl" / "dali", "big-lib", "2.0",
                     {f"big_lib/m{k}.py": source_text(500, k) for k in range(4)})
    return {"core": core, "dali": big, "groups": {"core": core.parent, "dali": big.parent}}


def pack_small(wheels, tmp_path, bundle_kib=24, part_kib=16):
    return bundle.pack(wheels["groups"], tmp_path / "bundles", tmp_path / "cache", bundle_kib * KIB,
                          part_kib * KIB, compress_above=8 * KIB)


def test_bundles_respect_the_limits_and_cover_every_byte_in_order(wheels, tmp_path):
    manifest = pack_small(wheels, tmp_path)
    out = tmp_path / "bundles"
    assert manifest["bundles"] == [f"bundle-{i}" for i in range(1, len(manifest["bundles"]) + 1)]
    assert len(manifest["bundles"]) >= 2
    for name in manifest["bundles"]:
        parts = [f for f in (out / name).iterdir() if f.name != transport.MANIFEST]
        assert sum(f.stat().st_size for f in parts) <= 24 * KIB
        assert all(f.stat().st_size <= 16 * KIB for f in parts)
        assert json.loads((out / name / transport.MANIFEST).read_text()) == manifest
    by_file = {w["file"]: w for w in manifest["wheels"]}
    big = by_file[wheels["dali"].name]
    assert big["encoding"] == "xz" and len(big["parts"]) >= 2
    assert by_file[wheels["core"].name]["encoding"] == "raw"
    assert manifest["wheels"][0]["group"] == "core"             # what feedline needs comes first
    assert {p["bundle"] for w in manifest["wheels"] if w["group"] == "core" for p in w["parts"]} == {"bundle-1"}
    assert all(p["bundle"] != "bundle-1" for w in manifest["wheels"] if w["group"] == "dali" for p in w["parts"])
    for wheel in manifest["wheels"]:
        blob = b"".join((out / p["bundle"] / p["name"]).read_bytes() for p in wheel["parts"])
        assert sum(p["size"] for p in wheel["parts"]) == len(blob)
        if wheel["encoding"] == "raw":
            assert blob == Path(wheels["core"]).read_bytes()


def test_parts_arrive_bundle_by_bundle_and_rebuild_the_wheels(wheels, tmp_path):
    manifest = pack_small(wheels, tmp_path)
    out, store, rebuilt = tmp_path / "bundles", tmp_path / "store", tmp_path / "wheels"
    first, *rest = [out / b for b in manifest["bundles"]]
    received, problems = transport.receive([first], store)
    assert received and not problems
    report = transport.assemble(store, rebuilt)
    big = report["wheels"][wheels["dali"].name]
    assert not big["ok"] and "carry bundle-2" in big["reason"]
    assert report["groups"]["dali"]["complete"] is False
    transport.receive(rest, store)
    report = transport.assemble(store, rebuilt)
    assert all(row["ok"] for row in report["wheels"].values())
    assert (rebuilt / wheels["core"].name).read_bytes() == wheels["core"].read_bytes()
    with zipfile.ZipFile(wheels["dali"]) as a, zipfile.ZipFile(rebuilt / wheels["dali"].name) as b:
        assert a.namelist() == b.namelist()
        assert all(a.read(n) == b.read(n) for n in a.namelist())
        assert all(i.compress_type == zipfile.ZIP_STORED for i in b.infolist())
    assert transport.status_lines(manifest, store)[1] == "all bundles received"


def test_a_damaged_part_is_refused(wheels, tmp_path):
    manifest = pack_small(wheels, tmp_path)
    bundle = tmp_path / "bundles" / manifest["bundles"][-1]
    part = next(f for f in bundle.iterdir() if f.name != transport.MANIFEST)
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    received, problems = transport.receive([bundle], tmp_path / "store")
    assert part.name not in received
    assert len(problems) == 1 and part.name in problems[0] and "sha256" in problems[0]
    assert not (tmp_path / "store" / part.name).exists()


def test_a_store_of_another_pack_is_emptied(wheels, tmp_path):
    manifest = pack_small(wheels, tmp_path)
    store = tmp_path / "store"
    transport.receive([tmp_path / "bundles" / manifest["bundles"][0]], store)
    (store / "stale.part00").write_bytes(b"old")
    other = make_wheel(tmp_path / "other", "other-lib", "1.0", {"other_lib/__init__.py": b"X = 1\n"})
    again = bundle.pack({"core": other.parent}, tmp_path / "b2", tmp_path / "cache", 24 * KIB, 16 * KIB)
    transport.receive([tmp_path / "b2" / again["bundles"][0]], store)
    assert not (store / "stale.part00").exists()
    assert transport.read_manifest(store)["pack_id"] == again["pack_id"] != manifest["pack_id"]


def test_closure_follows_extras_and_names_what_is_missing(tmp_path):
    core, dali = tmp_path / "core", tmp_path / "dali"
    make_wheel(core, "codec", "0.9.0", {"codec/__init__.py": b""},
               requires=['jpeg; extra == "jpeg"', 'tiff; extra == "all"', 'numpy'])
    make_wheel(core, "jpeg", "13.0", {"jpeg/__init__.py": b""})
    make_wheel(dali, "dali", "2.4", {"dali/__init__.py": b""}, requires=["codec[all]<0.10", "six>=1.16"])
    make_wheel(dali, "numpy", "9.9", {"numpy/__init__.py": b""})
    provided = {"numpy": None, "six": closure.Version("1.17")}
    carried, notes = closure.choose([("core", core), ("dali", dali)], provided)
    assert set(carried) == {"codec", "jpeg", "dali"}
    assert any("numpy" in n for n in notes)                    # the image's numpy stays
    roots = [closure.Requirement(n) for n in carried]
    assert closure.unmet(roots, carried, provided) == ["tiff; extra == \"all\": neither carried nor on the GPU image"]
    make_wheel(dali, "tiff", "0.8", {"tiff/__init__.py": b""})
    carried, _ = closure.choose([("core", core), ("dali", dali)], provided)
    assert closure.unmet(roots, carried, provided) == []
    tight = {"numpy": None, "six": closure.Version("1.15")}
    assert closure.unmet(roots, carried, tight) == ["six>=1.16 but the GPU image has six 1.15"]


def test_without_cuda_the_wheels_install_and_the_smoke_test_says_no_cuda_device(wheels, tmp_path):
    """A budget that plans setup and smoke alone: the carried wheels installed and importable,
    the smoke test "skipped: no CUDA device", exit code 3, $OUT complete, the repository
    untouched. (`make gpu-rehearsal` runs every stage so, with the GPU machine's software.)"""
    manifest = pack_small(wheels, tmp_path)
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, FEEDLINE_GPU_WORK=str(work), GPU_WHEELS_OUT=str(tmp_path / "bundles"), OUT=str(out),
               PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="", PIP_NO_INDEX="1")
    results = REPO / "bench" / "results" / "gpu"
    before = sorted(results.rglob("*")) if results.exists() else []
    budget = plan.RESERVE_S + sum(s.nominal_s for s in plan.CORE[:2])          # setup and smoke
    proc = subprocess.run(["bash", str(GPU_CI / "check.sh"), "--budget-s", str(budget)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no CUDA device" in proc.stderr
    stages = work / "stages"
    setup = json.loads((stages / "core.setup.json").read_text())
    assert sorted(setup["installed"]) == sorted(w["file"] for w in manifest["wheels"] if w["group"] == "core")
    assert setup["missing"] == [] and setup["problems"] == []
    smoke = json.loads((stages / "core.smoke.json").read_text())
    assert smoke["available"] is False and smoke["cpu_decoded"] == 8
    assert (smoke["status"], smoke["reason"]) == ("skipped", "no CUDA device")
    assert sorted(p.name for p in stages.glob("core.*.json")) == ["core.plan.json", "core.setup.json",
                                                                 "core.smoke.json"]
    probe = subprocess.run([sys.executable, "-c", "import fl_gpu_probe; print(fl_gpu_probe.VALUE)"],
                           env=dict(os.environ, PYTHONPATH=str(work / "site")), capture_output=True, text=True)
    assert probe.stdout.strip() == "42"
    summary_out = json.loads((out / "summary.json").read_text())   # the device tool's $OUT has it all
    assert list(summary_out["stages"])[:2] == ["core.setup", "core.smoke"]
    assert summary_out["stages"]["core.setup"]["status"] == "ok"
    with tarfile.open(out / "gpu-results.tar.gz") as tar:
        assert "bench/results/gpu/unknown/summary.json" in tar.getnames()
    assert (sorted(results.rglob("*")) if results.exists() else []) == before   # nothing written in the repository


def test_the_check_refuses_a_budget_with_no_room(tmp_path):
    proc = subprocess.run(["bash", str(GPU_CI / "check.sh"), "--budget-s", "12"], capture_output=True,
                          text=True, env=dict(os.environ, PYTHON=sys.executable, FEEDLINE_GPU_WORK=str(tmp_path)))
    assert proc.returncode == 2 and "leaves no room for any stage" in proc.stderr


def test_a_pip_failure_is_reported_with_its_error(tmp_path):
    """A wheel pip refuses: the setup stage fails, says pip's error, and the check goes on."""
    bad = tmp_path / "dl" / "core" / "broken_lib-1.0-py3-none-any.whl"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"this is not a zip file")
    bundle.pack({"core": bad.parent}, tmp_path / "bundles", tmp_path / "cache", 24 * KIB, 16 * KIB)
    work = tmp_path / "work"
    env = dict(os.environ, FEEDLINE_GPU_WORK=str(work), GPU_WHEELS_OUT=str(tmp_path / "bundles"),
               PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="", PIP_NO_INDEX="1")
    proc = subprocess.run(["bash", str(GPU_CI / "check.sh"), "--budget-s", "60"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert "pip install FAILED" in proc.stdout and "broken_lib" in proc.stdout
    setup = json.loads((work / "stages" / "core.setup.json").read_text())
    assert setup["status"] == "failed" and "broken_lib" in setup["tail"]
    assert (work / "stages" / "core.smoke.json").is_file()   # the next stage still ran


def test_junit_counts(tmp_path):
    import pytest_runs
    xml = tmp_path / "j.xml"
    xml.write_text('<testsuites><testsuite name="pytest" tests="10" failures="1" errors="1" skipped="3" '
                   'time="2.5"/></testsuites>')
    assert pytest_runs.junit_counts(xml) == {"passed": 5, "failed": 2, "skipped": 3}
    assert pytest_runs.junit_counts(tmp_path / "missing.xml") is None


@pytest.mark.parametrize("name, kind", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"), (None, "unknown")])
def test_kind_from_the_device_name(name, kind):
    assert summary.kind_of(name) == kind


def test_summary_targets_say_what_was_missed_and_why(tmp_path):
    stages, results, logs = tmp_path / "stages", tmp_path / "results", tmp_path / "logs"
    stages.mkdir()
    logs.mkdir()
    (logs / "core.loader.log").write_text("x" * 100_000)
    bench = {
        "loader": {"loader_img_s": 12_500.0, "torchvision_img_s": 3_000.0, "diagnosis": None,
                   "gil": {"consumer_gil_ms_per_image": 0.012, "reason": None}},
        "gpu_whole_decode": {"default_engine_img_s": 10_000.0, "gpu_img_s": 12_000.0,
                             "gpu_mode": "whole image + GPU crop", "results": []},
        "prefetch": {"hidden_fraction": 0.97},
        "resnet50": {"real_images_per_s": 2_700.0, "synthetic_images_per_s": 3_000.0, "timed_steps": 61,
                     "resnet50_real_over_synthetic": 0.9, "diagnosis": "input-bound: waited 9%",
                     "epochs": [{"epoch": 0, "data_wait": 0.09}]},
    }
    at = 0
    (stages / "core.smoke.json").write_text(json.dumps({
        "status": "ok", "order": 1, "device": "NVIDIA H100 80GB HBM3", "gpus": 1, "cuda": "13.0", "torch": "2.11.0",
        "nvimgcodec": "0.9.0.20", "region_decode_safe": False, "available": True}))
    for stage, payload in bench.items():
        at += 1
        (tmp_path / f"{stage}.json").write_text(json.dumps(payload))
        (stages / f"core.{stage}.json").write_text(json.dumps({"status": "ok", "order": 2 + at,
                                                               "json": str(tmp_path / f"{stage}.json")}))
    (stages / "core.grid_splice.json").write_text(json.dumps({
        "status": "crashed", "signal": "SIGSEGV", "order": 9, "tail": "Fatal Python error: Segmentation fault"}))
    (stages / "core.cuda_tests.json").write_text(json.dumps({
        "status": "problems", "order": 2, "passed": 20, "failed": 0, "skipped": 0, "crashed": ["test_a.py"],
        "files": [{"file": "test_a.py", "status": "crashed", "signal": "SIGSEGV", "running_when_stopped": "t::x"},
                  {"file": "test_b.py", "status": "ok"}]}))
    out = tmp_path / "out"
    out.mkdir()
    path = summary.write(stages, logs, results, out)
    assert path == results / "bench" / "results" / "gpu" / "h100" / "summary.json"
    assert (out / "summary.json").read_text() == path.read_text()
    with tarfile.open(out / "gpu-results.tar.gz") as tar:
        names = tar.getnames()
    assert "bench/results/gpu/h100/loader_img_s.json" in names and "bench/results/gpu/h100/logs/core.loader.log" in names
    assert (path.parent / "logs" / "core.loader.log").stat().st_size == summary.LOG_TAIL
    s = json.loads(path.read_text())
    assert list(s["stages"])[:2] == ["core.smoke", "core.cuda_tests"]              # in the order they ran
    assert s["stages"]["core.grid_splice"]["status"] == "crashed" and s["stages"]["core.grid_splice"]["signal"] == "SIGSEGV"
    by_check = {t["check"].split(":")[0].split(" /")[0]: t for t in s["targets"]}
    assert by_check["loader_img_s"]["passed"] is True and "why" not in by_check["loader_img_s"]
    assert by_check["loader_consumer_gil_ms_per_image"]["passed"] is True
    gpu = by_check["gpu_decode_img_s"]
    assert gpu["measured"] == pytest.approx(1.2) and gpu["passed"] is True and "(whole image + GPU crop)" in gpu["check"]
    assert by_check["dali_mixed_img_s"]["passed"] is None and by_check["dali_mixed_img_s"]["why"] == "not run"
    assert by_check["resnet50_real_over_synthetic"]["why"] == "input-bound: waited 9%"
    assert by_check["tests"]["passed"] is False and "test_a.py: crashed (SIGSEGV) in t::x" in by_check["tests"]["why"]
    assert s["figures"]["prefetch_overlap"] == 0.97 and s["figures"]["region_decode_safe"] is False
    assert s["dali"]["installed"] is False
    budget = s["profile"]["per_batch_of_256_ms"]
    assert budget["loader"] == pytest.approx(256e3 / 12_500) and budget["resnet50_step"] == pytest.approx(256e3 / 3_000)
    assert s["benchmarks"]["loader_img_s"] == "bench/results/gpu/h100/loader_img_s.json"
    table = summary.markdown(s)
    assert ("| resnet50_real_over_synthetic: ResNet-50 bf16, >= 60 timed steps each (here 61) | 0.90 | >= 0.95 "
            "| **no** |") in table
    assert "(here 61): input-bound: waited 9%" in table


def test_resnet50_is_judged_only_over_enough_timed_steps(tmp_path):
    """real/synthetic over 16 timed steps is no figure to judge: not measured, and said why."""
    stages = tmp_path / "stages"
    stages.mkdir()
    for steps in (16, 61):
        (tmp_path / "resnet50.json").write_text(json.dumps({"resnet50_real_over_synthetic": 0.99,
                                                            "timed_steps": steps}))
        (stages / "core.resnet50.json").write_text(json.dumps({"status": "ok", "order": 7,
                                                               "json": str(tmp_path / "resnet50.json")}))
        s, _ = summary.compose(stages, tmp_path / "results")
        target = next(t for t in s["targets"] if t["check"].startswith("resnet50_real_over_synthetic"))
        if steps == 16:
            assert target["measured"] is None and target["passed"] is None and target["why"] == "only 16 timed steps"
        else:
            assert target["measured"] == 0.99 and target["passed"] is True
