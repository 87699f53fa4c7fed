"""Smoke tests of the benchmarks: each script runs in its --quick mode, as a user runs it
(`python bench/NAME.py`), and what it reports must be consistent with the work it did:
the images counted are the images asked for, every rate is the work over the seconds
recorded beside it, rows doing different work report different numbers, and every
ratio printed is the quotient of the printed rates. A quick run judges no target and
writes only under bench/results/quick/; a full run leaves the committed bench/results/*.json
alone unless --save asks; a rate no decoding can reach is an error. Nothing here times
anything or asserts a speed."""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.common import fmt, format_table, printed, ratio, target, targets_table, write_results
from bench.data import prepare_data, read_encoded
from bench.machine import machine_info
from feedline.sample import make_photo_folder

ROOT = Path(__file__).resolve().parents[1]

TINY_SIZES = [(160, 120), (120, 160), (200, 150)]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench") / "images"
    make_photo_folder(str(root), n=16, classes=2, seed=3, sizes=TINY_SIZES)
    return root


def run_script(name: str, *args: str) -> str:
    """``python bench/NAME.py ARGS`` from the repository root; its stdout."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def load(path: Path, name: str) -> dict:
    payload = json.loads(path.read_text())
    assert payload["benchmark"] == name
    machine = payload["machine"]
    assert machine["cpu"] and machine["usable_cores"] >= 1
    assert machine["libraries"]["torch"] and machine["libraries"]["numpy"]
    assert (machine["gpu"] is None) == (not torch.cuda.is_available())
    for row in payload["results"]:
        assert row.get("available", True) or row["reason"], f"{row} is unavailable without a reason"
    return payload


def positive_finite(value) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def assert_quotient(shown: float, numerator: float, denominator: float) -> None:
    """``shown`` is what a reader gets dividing the two printed numbers."""
    assert shown == pytest.approx(printed(numerator) / printed(denominator), rel=1e-9)


def test_decoder_bench_quick(tiny_folder, tmp_path):
    out = tmp_path / "decoders.json"
    run_script("decoders", str(tiny_folder), "--quick", "--n", "8", "--out", str(out),
               "--cache-dir", str(tmp_path / "cache"))
    payload = load(out, "decoders")
    images = payload["params"]["images"]
    assert images == 8
    rows = [r for r in payload["results"] if r["available"]]
    pil = {r["threads"]: r for r in rows if r["name"] == "pil"}
    assert pil, "PIL, the reference, did not run"
    for row in rows:
        seconds = row["seconds"]
        assert seconds and all(positive_finite(s) for s in seconds), row["name"]
        assert row["images_per_s"] == pytest.approx(statistics.median(images / s for s in seconds)), row["name"]
        reference = pil.get(row["threads"]) or pil[max(pil)]
        assert_quotient(row["ratio"], row["images_per_s"], reference["images_per_s"])
    rates = [r["images_per_s"] for r in rows]
    assert len(set(rates)) == len(rates), "two decoders reported the same rate"
    assert out.with_suffix(".png").stat().st_size > 0


@pytest.mark.dali   # its rows include the DALI engine
def test_loader_bench_quick(tiny_folder, tmp_path):
    out = tmp_path / "loaders.json"
    stdout = run_script("loaders", str(tiny_folder), "--quick", "--batch-size", "4", "--device", "cpu",
                        "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-chart")
    payload = load(out, "loaders")
    params = payload["params"]
    asked = params["batches"] * params["batch_size"]
    assert params["images_per_measurement"] == asked == 2 * 4
    rows = {r["name"]: r for r in payload["results"]}
    assert set(rows) == {"feedline", "feedline-checked", "feedline-grid", "torch-dataloader-pil", "dali-cpu",
                         "decode-floor", "decode-pool"}
    for name, row in rows.items():   # DALI is installed where the tests run: missing is a failure
        assert row["available"], f"{name}: {row['reason']}"
        assert positive_finite(row["images_per_s"]), name
        assert row["images_per_s_min"] <= row["images_per_s"] <= row["images_per_s_max"]
    for name in ("feedline", "feedline-checked", "feedline-grid", "torch-dataloader-pil", "dali-cpu"):
        measurements = rows[name]["measurements"]
        assert len(measurements) == params["repeats"]
        assert all(m["images"] == asked for m in measurements), f"{name} delivered other than asked"
        expected = statistics.median(m["images"] / m["seconds"] for m in measurements)
        assert rows[name]["images_per_s"] == pytest.approx(expected), name
    floor = rows["decode-floor"]
    single = floor["single_thread_images_per_s"][floor["decoder"]]
    assert floor["images_per_s"] == pytest.approx(single * params["threads"])
    pool = rows["decode-pool"]
    for row in (floor, pool):
        assert len(row["measurements"]) == params["repeats"]
        assert all(m["images"] == params["floor_images"] for m in row["measurements"])
    assert pool["images_per_s"] == pytest.approx(statistics.median(m["images"] / m["seconds"]
                                                                   for m in pool["measurements"]))
    rates = [r["images_per_s"] for r in rows.values()]
    assert len(set(rates)) == len(rates), "two loaders reported the same rate"
    for row in rows.values():
        assert_quotient(row["x_dataloader"], row["images_per_s"], rows["torch-dataloader-pil"]["images_per_s"])
        assert_quotient(row["x_dali_cpu"], row["images_per_s"], rows["dali-cpu"]["images_per_s"])
        assert_quotient(row["x_floor"], row["images_per_s"], floor["images_per_s"])
    checks = {t["check"]: t for t in payload["targets"]}
    for other, column, needed in (("torch-dataloader-pil", "x_dataloader", 2.5), ("dali-cpu", "x_dali_cpu", 1.8),
                                  ("decode-floor", "x_floor", 0.9)):
        t = checks[f"feedline / {other}"]   # measured, but a quick run judges nothing
        assert t["measured"] == rows["feedline"][column] and t["passed"] is None and t["judged"] is False
    grid = checks["feedline-grid / feedline"]   # the grid pack of the same files over the default pack
    assert_quotient(grid["measured"], rows["feedline-grid"]["images_per_s"], rows["feedline"]["images_per_s"])
    assert payload["quick"] is True
    for name in ("feedline", "feedline-checked", "torch-dataloader-pil", "dali-cpu"):   # all decoded while timed
        assert rows[name]["images_per_s"] <= 4 * floor["images_per_s"], name
    assert len(payload["rss"]["rss_mib"]) == 2 and payload["rss"]["growth_pct"] is not None
    assert "targets not judged: a --quick run" in stdout and "pass" not in stdout.split("targets")[-1]
    assert "x columns: this row's img/s over that row's" in stdout


def test_augment_bench_quick(tiny_folder, tmp_path):
    """Every row runs (each part of the recipe alone and all together, for both loaders), every
    op has a CPU time; the ratios are the printed quotients."""
    out = tmp_path / "augment.json"
    stdout = run_script("augment", str(tiny_folder), "--quick", "--batch-size", "4", "--seconds", "0.2",
                        "--out", str(out))
    payload = load(out, "augment")
    rates = {r["name"]: r["img_s"] for r in payload["results"]}
    parts = ("", "+randaugment", "+erasing", "+mixup", "+recipe")
    assert set(rates) == {f"{loader}{part}" for loader in ("dataloader", "feedloader") for part in parts} | {
        "ops:pil", "ops:feedline"}
    assert all(positive_finite(v) for v in rates.values())
    for row in payload["results"]:
        if row["vs"]:
            assert_quotient(row["ratio"], row["img_s"], rates[row["vs"]])
    ops = {r["op"]: r for r in payload["ops"]}
    for name in ("tv ShearX", "tv Equalize", "timm Rotate bicubic", "jitter hue", "erasing value=0",
                 "whole RandAugment(2, 9)"):
        assert positive_finite(ops[name]["feedline_ms"]), name
    assert positive_finite(ops["tv Rotate"]["pil_ms"]) and ops["whole RandAugment(2, 9)"]["pil_ms"] is None
    checks = {t["check"]: t for t in payload["targets"]}
    assert set(checks) == {"feedloader+recipe over dataloader+recipe", "feedloader+recipe over feedloader"}
    assert all(t["passed"] is None for t in checks.values()) and payload["quick"] is True
    assert_quotient(checks["feedloader+recipe over dataloader+recipe"]["measured"], rates["feedloader+recipe"],
                    rates["dataloader+recipe"])
    assert "targets not judged" in stdout


def test_pack_bench_quick(tmp_path):
    out = tmp_path / "pack.json"
    stdout = run_script("pack", "--quick", "--n", "6", "--out", str(out), "--cache-dir", str(tmp_path / "cache"))
    payload = load(out, "pack")
    rows = {r["method"]: r for r in payload["results"]}
    assert {r["kind"] for r in rows.values()} == {"reference", "cli", "in-process"}
    assert sum(r["kind"] == "cli" for r in rows.values()) == 2
    tar = rows["tar -cf"]
    for name, row in rows.items():
        assert all(positive_finite(s) for s in row["seconds"]) and len(row["seconds"]) == payload["params"]["repeats"]
        assert row["median_s"] == pytest.approx(statistics.median(row["seconds"]))
        assert_quotient(row["x_tar"], row["median_s"], tar["median_s"])
        if "start-up" not in name:   # every archive holds every file
            assert row["files"] == 6, name
            assert row["files_per_s"] == pytest.approx(6 / row["median_s"])
    medians = [r["median_s"] for r in rows.values()]
    assert len(set(medians)) == len(medians), "two methods reported the same time"
    targets = payload["targets"]
    assert [t["check"].split(" / ")[0] for t in targets] == [n for n, r in rows.items() if r["kind"] == "cli"]
    for t in targets:
        assert t["measured"] == rows[t["check"].split(" / ")[0]]["x_tar"] and t["passed"] is None
    assert "(CLI, end to end)" in stdout and "(in-process)" in stdout and "targets not judged" in stdout
    profile = payload["profile"]   # one CLI pack under cProfile: where its time goes
    assert positive_finite(profile["total_s"]) and profile["top_by_self_time"]
    selfs = [row["self_s"] for row in profile["top_by_self_time"]]
    assert selfs == sorted(selfs, reverse=True) and all(row["calls"] >= 1 for row in profile["top_by_self_time"])


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
                                parser.parse_args(["--epochs-rss", "0", "--batch-size", "8", "--decoders", "pil"]))
    assert (options.epochs_rss, options.batch_size, options.n, options.decoders) == (0, 8, 2000, ("pil",))


def test_ratios_are_quotients_of_what_is_printed():
    # 767.4 and 762.4 print as 767 and 762: the ratio shown must be 767 / 762
    assert ratio(767.4, 762.4) == 767 / 762
    assert ratio(0.004812, 0.0123456) == 0.00481 / 0.0123
    assert ratio(None, 3.0) is None and ratio(3.0, None) is None and ratio(3.0, 0.0) is None


def test_fmt_keeps_three_significant_figures():
    assert [fmt(v) for v in (0.123456, 0.00812, 12.34, 9.996, 1234.5, 7, None, float("nan"))] == \
        ["0.123", "0.00812", "12.3", "10.0", "1,234", "7", "-", "-"]


def test_targets_table_says_which_are_missed():
    targets = [target("a / b", 2.6, 2.5), target("a / c", 1.2, 1.8), target("pack / tar", 3.0, 1.5, at_least=False),
               target("a / d", None, 0.9)]
    assert [t["passed"] for t in targets] == [True, False, False, None]
    table = targets_table(targets)
    assert "targets missed: a / c; pack / tar" in table and "not measured: a / d" in table
    assert ">= 2.5x" in table and "<= 1.5x" in table and "FAIL" in table and "pass" in table


def test_write_results_and_table(tmp_path):
    rows = [{"name": "a", "images_per_s": 1234.5, "ratio": 1.0}, {"name": "b", "images_per_s": None, "ratio": 0.5}]
    path = write_results("x", rows, {"n": 1}, tmp_path / "x.json", machine=machine_info(), extra_field=3)
    payload = json.loads(path.read_text())
    assert payload["results"] == rows and payload["params"] == {"n": 1} and payload["extra_field"] == 3
    table = format_table(rows, [("name", "name"), ("img/s", "images_per_s"), ("x", "ratio")])
    assert "1,234" in table.splitlines()[2] and table.splitlines()[3].split()[1] == "-"


def committed_results() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (ROOT / "bench" / "results").iterdir() if p.is_file()}


def test_runs_leave_the_committed_results_alone_unless_saved(tmp_path):
    """--quick writes under bench/results/quick/, a full run under bench/results/local/ (both
    ignored by git); only --save (or --out) writes elsewhere; --quick --save is refused."""
    before = committed_results()
    quick = ROOT / "bench" / "results" / "quick" / "pack.json"
    stdout = run_script("pack", "--quick", "--n", "6", "--cache-dir", str(tmp_path / "cache"))
    assert f"wrote {quick}" in stdout and json.loads(quick.read_text())["quick"] is True
    local = ROOT / "bench" / "results" / "local" / "decoders.json"
    stdout = run_script("decoders", "--n", "4", "--repeats", "1", "--only", "pil", "--no-chart",
                        "--cache-dir", str(tmp_path / "cache"))
    assert f"wrote {local}" in stdout and json.loads(local.read_text())["quick"] is False
    assert committed_results() == before
    ignored = subprocess.run(["git", "check-ignore", str(quick), str(local)], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == [str(quick), str(local)]
    for name in ("pack", "decoders", "loaders", "grid", "profile_thread", "targets", "before_after"):
        done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), "--quick", "--save"],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 2 and "--save keeps full runs only" in done.stderr, name


def test_save_writes_the_committed_path_and_quick_never_judges(tmp_path):
    from bench.common import LOCAL_DIR, QUICK_DIR, RESULTS_DIR, results_path
    assert results_path("x") == LOCAL_DIR / "x.json"
    assert results_path("x", quick=True) == QUICK_DIR / "x.json"
    assert results_path("x", save=True) == RESULTS_DIR / "x.json"
    assert results_path("x", tmp_path / "y.json", quick=True) == tmp_path / "y.json"
    with pytest.raises(ValueError, match="--save keeps full runs only"):
        results_path("x", quick=True, save=True)
    targets = [target("a / b", 9.0, 2.5), target("a / c", 0.1, 1.8)]
    path = write_results("x", [], out=tmp_path / "x.json", machine=machine_info(), quick=True, targets=targets)
    written = json.loads(path.read_text())
    assert written["quick"] is True and [t["passed"] for t in written["targets"]] == [None, None]
    table = targets_table(targets, quick=True)
    assert "not judged" in table and "pass" not in table and "FAIL" not in table


def test_a_rate_faster_than_decoding_allows_is_an_error():
    from bench.loaders import ImpossibleRate, check_possible
    rows = [{"name": "decode-floor", "images_per_s": 1000.0}, {"name": "decode-pool", "images_per_s": 800.0},
            {"name": "feedline", "images_per_s": 3900.0}, {"name": "dali-cpu", "images_per_s": None},
            {"name": "feedline-gpu", "images_per_s": 90000.0}]
    check_possible(rows)   # within 4x the floor; a GPU decoder has no CPU bound; unmeasured rows pass
    rows[2]["images_per_s"] = 427316.0   # the FeedLoader after a drain shorter than its buffer
    with pytest.raises(ImpossibleRate, match=r"feedline: 427,316 images/s is 427x the decode floor"):
        check_possible(rows)


def test_resize_bench_runs_and_tables_each_crop_kind(tmp_path):
    out = tmp_path / "resize.json"
    stdout = run_script("resize", "--quick", "--n", "2", "--size", "32", "--out", str(out))
    assert "feedline (torchvision's)" in stdout and "OpenCV bilinear (before)" in stdout
    rows = load(out, "resize")["results"]
    assert {(r["what"], r["crop"]) for r in rows} == {("decode", "-"), ("feedline (torchvision's)", "eval"),
                                                       ("OpenCV bilinear (before)", "eval"),
                                                       ("feedline (torchvision's)", "rrc"),
                                                       ("OpenCV bilinear (before)", "rrc")}
    assert all(r["ms_per_image"] > 0 for r in rows)


def test_mix_bench_runs_both_ways_for_each_mixer(tmp_path):
    out = tmp_path / "mix.json"
    stdout = run_script("mix", "--quick", "--out", str(out))
    assert "whole batch (before)" in stdout and "rows (after)" in stdout
    rows = load(out, "mix")["results"]
    mixed = [r for r in rows if r["mixer"] != "-"]
    assert len(mixed) == 10 and {r["way"] for r in mixed} == {"whole batch (before)", "rows (after)"}
    assert [r["way"] for r in rows if r["mixer"] == "-"] == ["one pass (x.mul_): the floor"]
    assert all(r["ms_min"] > 0 and r["ms_median"] >= r["ms_min"] and r["python_ms"] > 0 for r in rows)
    assert all(0.3 <= r["lambda"] <= 0.7 for r in mixed)
    for r in mixed:
        before = next(b for b in mixed if b["mixer"] == r["mixer"] and b["way"] == "whole batch (before)")
        assert r["x_before"] == ratio(r["ms_min"], before["ms_min"])


def test_mask_codec_bench_quick(tmp_path):
    """Every codec reads back the classes it stored (the script stops otherwise); each row's
    ratios are its printed bytes and time over PNG level 9's."""
    out = tmp_path / "mask_codec.json"
    run_script("mask_codec", "--quick", "--out", str(out))
    rows = load(out, "mask_codec")["results"]
    assert {(r["codec"], r["read"]) for r in rows} == {(c, read) for read in ("whole", "224 crop") for c in (
        "PNG level 9, OpenCV", "PNG level 1, OpenCV", "PNG level 9, Pillow", "deflate-rows (feedline)")}
    for r in rows:
        base = next(b for b in rows if b["read"] == r["read"] and b["codec"] == "PNG level 9, OpenCV")
        assert positive_finite(r["ms"]) and r["bytes"] > 0
        assert_quotient(r["size / PNG 9"], r["bytes"], base["bytes"])
        assert_quotient(r["time / PNG 9"], r["ms"], base["ms"])

