"""Smoke tests of the benchmarks: they run end to end on a tiny set and write the
documented JSON. Nothing here times anything or asserts a speed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # bench/ is not installed: this tree's
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import format_table, fmt, write_results
from bench.data import prepare_data, read_encoded
from bench.machine import machine_info
from feedline.sample import make_photo_folder

TINY_SIZES = [(160, 120), (120, 160), (200, 150)]
ROW_FIELDS = {"name", "available", "reason", "images_per_s", "images_per_s_min", "images_per_s_max", "ratio"}


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench") / "images"
    make_photo_folder(str(root), n=16, classes=2, seed=3, sizes=TINY_SIZES)
    return root


def _check_file(path, name):
    payload = json.loads(path.read_text())
    assert payload["benchmark"] == name
    machine = payload["machine"]
    assert machine["cpu"] and machine["usable_cores"] >= 1
    assert machine["libraries"]["torch"] and machine["libraries"]["numpy"]
    assert (machine["gpu"] is None) == (not torch.cuda.is_available())
    for row in payload["results"]:
        assert ROW_FIELDS <= set(row), row["name"]
        assert row["available"] or row["reason"], f"{row['name']} is unavailable without a reason"
    return payload


def test_decoder_bench_end_to_end(tiny_folder, tmp_path):
    from bench.decoders import DecoderBenchOptions, run_decoder_bench
    out = tmp_path / "decoders.json"
    run_decoder_bench(DecoderBenchOptions(data=str(tiny_folder), n=8, repeats=1, batch=4, check=2,
                                          out=str(out), cache_dir=str(tmp_path / "cache")))
    payload = _check_file(out, "decoders")
    rows = {(r["name"], r["threads"]): r for r in payload["results"]}
    names = {r["name"] for r in payload["results"]}
    assert {"pil", "opencv", "turbojpeg", "turbojpeg-fast", "turbojpeg-1/2", "turbojpeg-1/4", "dali-cpu",
            "dali-mixed", "dali-mixed-hw", "torchvision-nvjpeg", "feedline:turbojpeg"} <= names
    assert rows[("pil", 1)]["ratio"] == pytest.approx(1.0)
    for r in payload["results"]:
        if r["available"]:
            assert r["images_per_s"] > 0 and r["mp_per_s"] > 0 and r["ratio"] > 0
            assert r["mad_vs_pil"] is not None and r["mad_note"]
    # libjpeg-turbo's accurate decode is PIL's: a wrong decoder would differ by tens of levels
    assert rows[("turbojpeg", 1)]["mad_vs_pil"] < 2.0
    assert rows[("turbojpeg-1/2", 1)]["mad_note"].startswith("vs PIL decode box-resized")
    if not torch.cuda.is_available():
        for name in ("dali-mixed", "dali-mixed-hw", "torchvision-nvjpeg"):
            row = next(r for r in payload["results"] if r["name"] == name)
            assert not row["available"] and "no CUDA device" in row["reason"]
    assert out.with_suffix(".png").stat().st_size > 0


def test_loader_bench_end_to_end(tiny_folder, tmp_path):
    from bench.loaders import LoaderBenchOptions, run_loader_bench
    out = tmp_path / "loaders.json"
    run_loader_bench(LoaderBenchOptions(data=str(tiny_folder), batch_size=4, batches=1, repeats=1, warmup=1,
                                        drain=0, epochs_rss=2, floor_images=4, device="cpu", out=str(out),
                                        cache_dir=str(tmp_path / "cache")))
    payload = _check_file(out, "loaders")
    rows = {r["name"]: r for r in payload["results"]}
    assert set(rows) == {"torch-dataloader-pil", "dali-cpu", "feedline-turbojpeg", "feedline-opencv",
                         "feedline-turbojpeg-fast", "decode-floor", "decode-pool"}
    for name in ("torch-dataloader-pil", "feedline-turbojpeg", "feedline-opencv", "feedline-turbojpeg-fast",
                 "decode-floor", "decode-pool"):
        assert rows[name]["available"] and rows[name]["images_per_s"] > 0, rows[name]["reason"]
    assert rows["torch-dataloader-pil"]["ratio"] == pytest.approx(1.0)
    assert rows["feedline-turbojpeg"]["ratio_vs_floor"] > 0
    checks = [t["check"] for t in payload["targets"]]
    assert "feedline-turbojpeg / torch-dataloader-pil" in checks and "feedline-turbojpeg / decode-floor" in checks
    assert len(payload["rss"]["rss_mib"]) == 2 and payload["rss"]["growth_pct"] is not None
    assert payload["params"]["data"]["packed"] and payload["params"]["data"]["folder"]


def test_prepare_data_generates_once_then_reuses(tmp_path):
    first = prepare_data(None, 6, cache_dir=tmp_path, sizes=TINY_SIZES)
    assert first.images == 6 and len(list(first.folder.rglob("*.jpg"))) == 6 and first.packed.is_file()
    stamp = first.packed.stat().st_mtime_ns
    again = prepare_data(None, 6, cache_dir=tmp_path, sizes=TINY_SIZES)
    assert again == first and again.packed.stat().st_mtime_ns == stamp


def test_prepare_data_unpacks_a_packed_file_byte_for_byte(tmp_path):
    packed = prepare_data(None, 6, cache_dir=tmp_path / "a", sizes=TINY_SIZES).packed
    data = prepare_data(packed, cache_dir=tmp_path / "b")
    files = sorted(data.folder.rglob("*.jpg"))
    assert data.packed == packed.resolve() and len(files) == 6
    assert sorted(f.read_bytes() for f in files) == sorted(read_encoded(data))


def test_flags_map_onto_options():
    import argparse

    from bench import decoders, loaders
    from bench.args import options_from_args, shared_arguments
    parser = argparse.ArgumentParser()
    shared_arguments(parser, "decoders")
    decoders.add_arguments(parser)
    args = parser.parse_args(["data.lmdb", "--quick", "--n", "4", "--only", "pil,opencv"])
    options = options_from_args(decoders.DecoderBenchOptions, decoders.QUICK, args)
    assert (options.data, options.n, options.repeats, options.only) == ("data.lmdb", 4, decoders.QUICK["repeats"],
                                                                        ("pil", "opencv"))
    parser = argparse.ArgumentParser()
    shared_arguments(parser, "loaders")
    loaders.add_arguments(parser)
    options = options_from_args(loaders.LoaderBenchOptions, loaders.QUICK,
                                parser.parse_args(["--epochs-rss", "0", "--batch-size", "8"]))
    assert options.epochs_rss == 0 and options.batch_size == 8 and options.n == 2000


def test_write_results_and_table(tmp_path):
    rows = [{"name": "a", "images_per_s": 1234.5, "ratio": 1.0}, {"name": "b", "images_per_s": None, "ratio": 0.5}]
    path = write_results("x", rows, {"n": 1}, tmp_path / "x.json", machine=machine_info(), extra_field=3)
    payload = json.loads(path.read_text())
    assert payload["results"] == rows and payload["params"] == {"n": 1} and payload["extra_field"] == 3
    table = format_table(rows, [("name", "name"), ("img/s", "images_per_s"), ("x", "ratio")])
    assert "1,234" in table.splitlines()[2] and table.splitlines()[3].split()[1] == "-"
    assert fmt(0.123456) == "0.12" and fmt(None) == "-" and fmt(12.34) == "12.3"
