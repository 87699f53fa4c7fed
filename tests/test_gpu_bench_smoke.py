"""The GPU benchmarks (bench/gpu/*.py) in their tiny --cpu-smoke mode: they import, parse
their arguments, run their whole code path that has no CUDA in it, and write the JSON the
GPU check's summary reads. Their figures here mean nothing and are not checked. Without
--cpu-smoke and without CUDA they open their data, then exit with 3, which the GPU check
reports as "skipped: no CUDA device"."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
BAD = {"loader_img_s": ["--data", "x.lmdb", "--out", "x.json", "--threads", "0"],
       "gpu_decode": ["--data", "x.lmdb", "--out", "x.json", "--batches", "0"],
       "prefetch_overlap": ["--out", "x.json", "--batch", "0"],
       "resnet50": ["--data", "x.lmdb", "--out", "x.json", "--epochs", "0"],
       "ddp": ["--data", "x.lmdb", "--out", "x.json", "--batch-size", "0"],
       "photos": ["--out", "x", "--repeats", "0"]}


def run_script(name: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / "gpu" / f"{name}.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", sorted(BAD))
def test_help_and_a_bad_argument(name):
    assert run_script(name, "--help").returncode == 0
    bad = run_script(name, *BAD[name])
    assert bad.returncode == 2 and "must be at least 1" in bad.stderr, bad.stderr


def test_loader_bench_smoke(packed_lmdb, photo_folder, tmp_path):
    from bench.gpu import loader_img_s
    out = tmp_path / "loader.json"
    assert loader_img_s.main(["--data", str(packed_lmdb), "--folder", str(photo_folder), "--out", str(out),
                              "--cpu-smoke"]) == 0
    result = json.loads(out.read_text())
    rows = {r["name"]: r for r in result["results"]}
    assert list(rows) == ["feedline", "torchvision"]
    assert rows["feedline"]["images_per_s"] > 0 and result["loader_img_s"] == rows["feedline"]["images_per_s"]
    assert len(rows["feedline"]["samples"]) == 1 and result["engine"] == "processes (2 worker processes)"
    assert (rows["torchvision"]["images_per_s"] or 0) > 0 or "torchvision" in rows["torchvision"]["reason"]
    assert 0 <= result["profile"]["decode_threads_busy"] <= 1.5 and result["diagnosis"]
    assert result["targets"][0]["target"] == ">= 10000 img/s"
    assert result["gil"]["reason"] == "not asked (--gil-seconds 0)"


def test_the_loader_benchs_gil_step_is_left_out_with_its_reason_when_time_is_short(packed_lmdb, tmp_path):
    from bench.gpu import loader_img_s
    out = tmp_path / "loader.json"
    assert loader_img_s.main(["--data", str(packed_lmdb), "--out", str(out), "--cpu-smoke", "--gil-seconds", "5",
                              "--timeout", "1"]) == 0
    result = json.loads(out.read_text())
    assert result["gil"]["reason"].startswith("not run: ") and "25 s needed" in result["gil"]["reason"]
    assert result["loader_img_s"] > 0


def test_gpu_decode_bench_smoke(packed_lmdb, tmp_path):
    from bench.gpu import gpu_decode
    out = tmp_path / "decode.json"
    assert gpu_decode.main(["--data", str(packed_lmdb), "--out", str(out), "--cpu-smoke"]) == 0
    result = json.loads(out.read_text())
    rows = {r["name"]: r for r in result["results"]}
    assert rows["default"]["images_per_s"] > 0 and rows["default"]["engine"] == "processes"
    assert result["default_engine_img_s"] == rows["default"]["images_per_s"]
    assert rows["gpu"]["reason"] == rows["dali"]["reason"] == "needs CUDA" and result["gpu_mode"] == "needs CUDA"
    backends = {b["backend"]: b for b in result["backends"]}
    assert backends["CPU_ONLY"]["images_per_s"] > 0 and backends["CPU_ONLY"]["failed"] == 0
    assert backends["HW_GPU_ONLY"]["reason"] == "needs CUDA"


def test_prefetch_bench_without_cuda_says_why(tmp_path):
    from bench.gpu import prefetch_overlap
    out = tmp_path / "prefetch.json"
    assert prefetch_overlap.main(["--out", str(out), "--cpu-smoke"]) == 0
    assert "needs a GPU" in json.loads(out.read_text())["skipped"]


def test_resnet50_bench_smoke_runs_the_trainer_twice_over(packed_lmdb, tmp_path):
    from bench.gpu import resnet50
    out = tmp_path / "resnet50.json"
    assert resnet50.main(["--data", str(packed_lmdb), "--out", str(out), "--cpu-smoke"]) == 0
    result = json.loads(out.read_text())
    assert result["returncode"] == 0 and result["real_images_per_s"] > 0 and result["synthetic_images_per_s"] > 0
    assert "--synthetic-steps" in result["command"] and result["epochs"] and result["running"] is False
    steps = int(result["command"][result["command"].index("--synthetic-steps") + 1])
    assert result["timed_steps"] == steps - resnet50.warmup_steps() >= 1
    assert result["targets"][0]["measured"] is None        # too few timed steps to judge


def test_ddp_bench_smoke_under_torchrun(packed_lmdb, tmp_path):
    from bench.gpu import ddp
    out = tmp_path / "ddp.json"
    assert ddp.main(["--data", str(packed_lmdb), "--out", str(out), "--cpu-smoke"]) == 0
    result = json.loads(out.read_text())
    assert result["probe"]["backend"] == "gloo" and result["probe"]["checkpoint_round_trip"]
    assert result["trainer"]["checkpoints"] and result["trainer"]["checkpoint_step"] == 6
    assert result["ddp_ok"] is True


def test_photos_make_class_folders_and_a_packed_file(tmp_path):
    from bench.gpu import photos
    made = photos.prepare(tmp_path, n=23, workers=2)
    folder = Path(made["folder"])
    files = sorted(folder.glob("class_*/*.jpg"))
    assert len(files) == 23 and len({f.parent.name for f in files}) == photos.CLASSES
    assert all(f.read_bytes()[:2] == b"\xff\xd8" for f in files)
    from feedline import open_dataset
    with open_dataset(made["packed"]) as store:
        assert len(store) == 23
    assert photos.prepare(tmp_path, n=23)["folder"] == made["folder"]     # made once


def test_photos_repeated_make_a_longer_epoch_of_the_same_bytes(tmp_path):
    from bench.gpu import photos
    made = photos.prepare(tmp_path, n=7, workers=1, repeats=3)
    assert (made["photos"], made["images"]) == (7, 21)
    linked = sorted(Path(made["folder"]).glob("class_*/*.jpg"))
    originals = sorted(Path(tmp_path / "photos-7").glob("class_*/*.jpg"))
    assert len(linked) == 21 and all(f.stat().st_nlink == 4 for f in originals)   # itself and 3 links
    from feedline import open_dataset
    with open_dataset(made["packed"]) as store:
        records = sorted(bytes(store.read(i)) for i in range(len(store)))
    assert records == sorted(f.read_bytes() for f in originals for _ in range(3))


@pytest.mark.skipif(torch.cuda.is_available(), reason="proves what a script does without CUDA")
@pytest.mark.parametrize("name", ["loader_img_s", "gpu_decode", "resnet50", "grid_splice", "prefetch_overlap"])
def test_without_cuda_a_benchmark_opens_its_data_then_says_no_cuda_device(name, packed_lmdb, tmp_path):
    if name in ("loader_img_s", "resnet50") and importlib.util.find_spec("torchvision") is None:
        pytest.skip("its GPU run needs torchvision (the GPU machine has it), and so does this check before CUDA")
    data = [] if name == "prefetch_overlap" else ["--data", str(packed_lmdb)]
    done = run_script(name, *data, "--out", str(tmp_path / "x.json"))
    assert done.returncode == 3 and "no CUDA device" in done.stdout, done.stdout + done.stderr
    if data:
        missing = run_script(name, "--data", str(tmp_path / "missing.lmdb"), "--out", str(tmp_path / "x.json"))
        assert missing.returncode not in (0, 3) and "missing.lmdb" in missing.stderr
