"""bench/grid.py and bench/profile_thread.py in their --quick mode: they run end to end and
write the JSON the README quotes. Their figures mean nothing here and are not checked."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_script(name: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "bench" / f"{name}.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_grid_bench_quick(tmp_path):
    out = tmp_path / "grid.json"
    stdout = run_script("grid", "--quick", "--out", str(out))
    payload = json.loads(out.read_text())
    rows = {(r["set"], r["layout"]): r for r in payload["results"]}
    assert set(rows) == {(s, layout) for s in ("photos", "large") for layout in ("original", "grid")}
    for s in ("photos", "large"):
        assert "GridDecoder" in rows[s, "grid"]["decoder"]
        assert rows[s, "grid"]["size_mib"] > rows[s, "original"]["size_mib"]     # the markers cost bytes
    # the large set's photos are 1-3 megapixels: more bytes per image than the benchmark photos
    per_image = {s: rows[s, "original"]["size_mib"] / payload["params"]["n"][s] for s in ("photos", "large")}
    assert per_image["large"] > 4 * per_image["photos"]
    assert all(r["loader_img_s"] > 0 and r["recipe_img_s"] > 0 and r["decode_img_s"] > 0 and r["pack_s"] > 0
               for r in rows.values())
    checks = [t["check"] for t in payload["targets"]]
    for s in ("photos", "large"):
        assert any(c.startswith(f"{s}: grid / original FeedLoader img/s with the recipe") for c in checks)
        assert any(c.startswith(f"{s}: grid pack") for c in checks)
    assert "targets not judged" in stdout


def test_profile_bench_quick(tmp_path):
    out = tmp_path / "profile.json"
    run_script("profile_thread", "--quick", "--out", str(out))
    payload = json.loads(out.read_text())
    rows = {r["layout"]: r for r in payload["results"]}
    assert rows["original"]["parse"] == rows["original"]["splice"] == 0   # no grid, no splice
    assert rows["grid"]["parse"] > 0 and rows["grid"]["splice"] > 0
    for row in rows.values():
        assert row["total_f32"] == pytest.approx(row["total_u8"] + row["normalize_f32"])
    consumers = {(c["layout"], c["dtype"]) for c in payload["consumer"]}
    assert consumers == {(layout, dtype) for layout in rows for dtype in ("float32", "uint8")}
