"""converters.pack and `feedline pack`: folders in, complete stores out, bad files accounted for."""
from __future__ import annotations

import argparse
import csv
import datetime
import os

import cv2
import numpy as np
import pytest
import xxhash

import feedline
import helpers_images as imgs
from converters import PackOptions, PackReport, pack, read_error_report
from feedline.core.errors import FeedlineError, PackError, StoreError

SIZES = [(96, 64), (64, 96), (80, 60)]


@pytest.fixture(scope="session")
def photos(tmp_path_factory) -> str:
    """18 realistic JPEGs in 3 class folders (small, so the whole file runs in seconds)."""
    from feedline.sample import make_photo_folder
    root = str(tmp_path_factory.mktemp("photos") / "src")
    make_photo_folder(root, n=18, classes=3, seed=3, gray_fraction=0.2, sizes=SIZES)
    return root


@pytest.fixture(scope="session")
def mixed(tmp_path_factory) -> tuple[str, dict, dict]:
    """Class 'good' with every convertible kind, class 'bad' with every bad kind."""
    root = str(tmp_path_factory.mktemp("mixed") / "src")
    good = imgs.write_good(os.path.join(root, "good"))
    bad = imgs.write_bad(os.path.join(root, "bad"))
    return root, good, bad


def files_of(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                  for d, _, names in os.walk(root) for f in names)


def records(path: str) -> list[tuple]:
    with feedline.open_dataset(path) as ds:
        return [(bytes(ds.read(i)), ds.label(i), ds.size(i), ds.path(i)) for i in range(len(ds))]


def meta_without_created(path: str) -> dict:
    with feedline.open_dataset(path) as ds:
        meta = dict(ds.meta)
    meta.pop("created")
    return meta


def leftovers(out: str) -> list[str]:
    folder = os.path.dirname(out)
    return sorted(f for f in os.listdir(folder) if f.startswith(os.path.basename(out)) and f != os.path.basename(out))


# --- round trip ----------------------------------------------------------------

@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_jpegs_round_trip_byte_for_byte(photos, tmp_path, ext):
    out = str(tmp_path / f"train.{ext}")
    report = pack(photos, out, quality=90)
    assert isinstance(report, PackReport)
    assert (report.found, report.packed, report.converted, report.skipped) == (18, 18, 0, [])
    assert report.error_report is None and leftovers(out) == []
    with feedline.open_dataset(out) as ds:
        assert ds.kind == ("lmdb" if ext == "lmdb" else "hdf5")
        assert len(ds) == 18 and ds.classes == ["class_000", "class_001", "class_002"]
        for i in range(len(ds)):
            rel = ds.path(i)
            with open(os.path.join(photos, rel), "rb") as fh:
                source = fh.read()
            assert bytes(ds.read(i)) == source
            assert int(ds.checksums[i]) == xxhash.xxh3_64_intdigest(source)
            assert ds.label(i) == ds.classes.index(rel.split("/")[0])
            decoded = cv2.imdecode(np.frombuffer(bytes(ds.read(i)), np.uint8), cv2.IMREAD_UNCHANGED)
            assert ds.size(i) == decoded.shape[:2]
        assert [ds.path(i) for i in range(len(ds))] == files_of(photos)
        meta = ds.meta
    assert meta["count"] == 18 and meta["format_version"] == 2 and meta["checksum"] == "xxh3_64"
    assert meta["classes"] == ["class_000", "class_001", "class_002"]
    assert meta["source"] == os.path.abspath(photos)
    assert meta["feedline_version"] == feedline.__version__
    assert meta["pack_options"]["quality"] == 90
    assert meta["pack_options"]["format"] == ("lmdb" if ext == "lmdb" else "hdf5")
    datetime.datetime.fromisoformat(meta["created"])


def test_lmdb_and_hdf5_hold_the_same_records(mixed, tmp_path):
    root = mixed[0]
    a = pack(root, str(tmp_path / "a.lmdb"))
    b = pack(root, str(tmp_path / "b.hdf5"))
    assert records(str(tmp_path / "a.lmdb")) == records(str(tmp_path / "b.hdf5"))
    assert (a.packed, a.converted, a.skipped) == (b.packed, b.converted, b.skipped)
    ma, mb = meta_without_created(str(tmp_path / "a.lmdb")), meta_without_created(str(tmp_path / "b.hdf5"))
    assert ma.pop("pack_options").pop("format") == "lmdb" and mb.pop("pack_options").pop("format") == "hdf5"
    assert ma == mb


def test_lmdb_is_one_file_without_a_lock_file(photos, tmp_path):
    pack(photos, str(tmp_path / "x.lmdb"))
    assert os.listdir(tmp_path) == ["x.lmdb"]


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_thread_count_does_not_change_the_output(mixed, tmp_path, ext):
    pack(mixed[0], str(tmp_path / f"one.{ext}"), jobs=1)
    pack(mixed[0], str(tmp_path / f"two.{ext}"), jobs=2)
    one = records(str(tmp_path / f"one.{ext}"))
    assert len(one) > 0 and one == records(str(tmp_path / f"two.{ext}"))


def test_lmdb_map_grows_as_needed(photos, tmp_path, monkeypatch):
    import converters.lmdb_writer as lw
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", 64 * 1024)
    pack(photos, str(tmp_path / "small.lmdb"), commit_every=5)
    assert records(str(tmp_path / "small.lmdb")) == records_of_fresh_pack(photos, tmp_path)


@pytest.mark.parametrize("copy_file_range", [True, False])
def test_hdf5_when_the_images_land_elsewhere_they_are_copied(photos, tmp_path, monkeypatch, copy_file_range):
    import errno

    import converters.hdf5_writer as hw
    reference = records_of_fresh_pack(photos, tmp_path, "h5")  # packed the usual way, before the patches
    monkeypatch.setattr(hw, "images_offset", lambda: 8192)  # HDF5 will put them at 2048
    if not copy_file_range:
        def unsupported(*args):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        monkeypatch.setattr(hw.os, "copy_file_range", unsupported)
    pack(photos, str(tmp_path / "copied.h5"), commit_every=5)
    assert records(str(tmp_path / "copied.h5")) == reference
    assert sorted(os.listdir(tmp_path)) == ["copied.h5", "reference.h5"]


def records_of_fresh_pack(src: str, tmp_path, ext: str = "lmdb", **kw) -> list[tuple]:
    out = str(tmp_path / f"reference.{ext}")
    if not os.path.exists(out):
        pack(src, out, **kw)
    return records(out)


# --- mixed and bad inputs ------------------------------------------------------

def test_mixed_folder_converts_and_reports(mixed, tmp_path):
    root, good, bad = mixed
    out = str(tmp_path / "mixed.lmdb")
    report = pack(root, out)
    unsupported = {"good/twelve.jpg"}  # no 12-bit JPEG decoder without libjpeg-turbo 3
    assert report.found == len(good) + len(bad)
    assert report.packed + len(report.skipped) == report.found
    assert report.converted == report.packed - len(imgs.PASS_THROUGH)
    skipped = {s.path: s.reason.value for s in report.skipped}
    expected = {f"bad/{name}": reason for name, reason in bad.items()}
    assert {k: v for k, v in skipped.items() if k not in unsupported} == expected
    assert set(skipped) - set(expected) <= unsupported
    assert report.skipped_by_reason == {r: list(skipped.values()).count(r) for r in set(skipped.values())}
    # The error report next to OUT: CSV with a header, one row per skipped file.
    assert report.error_report == out + ".errors.csv"
    with open(report.error_report, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["path", "reason", "detail"]
    assert {r[0]: r[1] for r in rows[1:]} == skipped
    assert read_error_report(report.error_report) == report.skipped
    with feedline.open_dataset(out) as ds:
        assert ds.classes == ["bad", "good"] and len(ds) == report.packed
        for i in range(len(ds)):
            name = ds.path(i).split("/", 1)[1]
            want = good[name]
            got = cv2.imdecode(np.frombuffer(bytes(ds.read(i)), np.uint8),
                               cv2.IMREAD_GRAYSCALE if want.ndim == 2 else cv2.IMREAD_COLOR)
            got = got if want.ndim == 2 else got[..., ::-1]
            assert ds.size(i) == want.shape[:2]
            assert np.abs(got.astype(int) - want).mean() < 4, name
    lines = report.summary_lines()
    assert any("packed + skipped = found" in line for line in lines)
    assert any("errors.csv" in line for line in lines)


def test_fail_policy_stops_at_the_first_bad_file(mixed, tmp_path):
    out = str(tmp_path / "strict.h5")
    with pytest.raises(PackError) as err:
        pack(mixed[0], out, on_error="fail", commit_every=2)
    first_bad = sorted(mixed[2])[0]  # bad/ sorts before good/
    assert os.path.join("bad", first_bad) in str(err.value)
    assert mixed[2][first_bad] in str(err.value)
    assert os.listdir(tmp_path) == []


def test_every_file_bad_is_an_error_and_leaves_nothing(tmp_path):
    src = tmp_path / "src"
    imgs.write_bad(str(src))
    out = tmp_path / "out.lmdb"
    with pytest.raises(PackError, match="none of the 9 image files"):
        pack(str(src), str(out))
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_missing_or_empty_source_is_a_feedline_error(tmp_path):
    with pytest.raises(FeedlineError, match="no such folder"):
        pack(str(tmp_path / "nope"), str(tmp_path / "o.lmdb"))
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    (tmp_path / "empty" / "cls" / "notes.txt").write_text("x")
    with pytest.raises(FeedlineError, match="no images"):
        pack(str(tmp_path / "empty"), str(tmp_path / "o.lmdb"))
    assert not (tmp_path / "o.lmdb").exists()


def test_file_name_that_is_not_utf8_is_skipped(tmp_path):
    src = tmp_path / "src"
    imgs.baseline_jpeg(str(src / "good.jpg"))
    with open(os.path.join(os.fsencode(src), b"bad\xffname.jpg"), "wb") as fh:
        fh.write((src / "good.jpg").read_bytes())
    report = pack(str(src), str(tmp_path / "o.lmdb"))
    assert report.packed == 1 and [s.reason.value for s in report.skipped] == ["unreadable"]
    assert "UTF-8" in report.skipped[0].detail
    assert "bad" in (tmp_path / "o.lmdb.errors.csv").read_text()


# --- OUT handling -----------------------------------------------------------

@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_existing_out_is_refused_then_overwritten(photos, tmp_path, ext):
    out = tmp_path / f"o.{ext}"
    out.write_bytes(b"precious")
    with pytest.raises(PackError, match="--overwrite"):
        pack(photos, str(out))
    assert out.read_bytes() == b"precious"
    pack(photos, str(out), overwrite=True)
    assert len(feedline.open_dataset(str(out))) == 18


def test_existing_out_untouched_when_the_pack_fails(mixed, tmp_path):
    out = tmp_path / "o.h5"
    out.write_bytes(b"precious")
    with pytest.raises(PackError):
        pack(mixed[0], str(out), overwrite=True, on_error="fail")
    assert out.read_bytes() == b"precious"
    assert sorted(os.listdir(tmp_path)) == ["o.h5"]


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_stale_error_report_is_removed(photos, tmp_path, ext):
    out = tmp_path / f"o.{ext}"
    (tmp_path / f"o.{ext}.errors.csv").write_text("path,reason,detail\nx,corrupt,old\n")
    report = pack(photos, str(out))
    assert report.error_report is None and os.listdir(tmp_path) == [f"o.{ext}"]


@pytest.mark.parametrize("name, fmt, kind", [
    ("data.h5", None, "hdf5"), ("data.HDF5", None, "hdf5"), ("data.lmdb", None, "lmdb"),
    ("data.h5", "lmdb", "lmdb"), ("data.lmdb", "hdf5", "hdf5"), ("data.bin", "hdf5", "hdf5"),
])
def test_format_from_extension_or_flag(photos, tmp_path, name, fmt, kind):
    pack(photos, str(tmp_path / name), format=fmt)
    assert feedline.open_dataset(str(tmp_path / name)).kind == kind


def test_unknown_extension_without_format_is_refused(photos, tmp_path):
    with pytest.raises(PackError, match="--format"):
        pack(photos, str(tmp_path / "data.bin"))


@pytest.mark.parametrize("kw, match", [({"quality": 0}, "quality"), ({"quality": 101}, "quality"),
                                       ({"on_error": "ignore"}, "on_error"), ({"format": "zip"}, "format"),
                                       ({"max_side": 0}, "max_side"), ({"jobs": "2"}, "jobs")])
def test_options_are_validated_when_built(kw, match):
    with pytest.raises(PackError, match=match):
        PackOptions(**kw)


# --- labels -------------------------------------------------------------------

@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_folder_without_subfolders_is_one_class(tmp_path, ext):
    src = tmp_path / "flowers"
    for name in ("b.jpg", "a.png", ".hidden.jpg"):
        (imgs.baseline_jpeg if name.endswith("jpg") else imgs.png_rgb)(str(src / name))
    pack(str(src), str(tmp_path / f"o.{ext}"))
    with feedline.open_dataset(str(tmp_path / f"o.{ext}")) as ds:
        assert ds.classes == ["flowers"]
        assert [ds.path(i) for i in range(len(ds))] == ["a.png", "b.jpg"]
        assert list(ds.labels) == [0, 0]


def test_labels_from_csv(photos, tmp_path):
    labels = tmp_path / "labels.csv"
    rels = files_of(photos)[:6]
    labels.write_text("path,label\n" + "".join(f"{r},{'cat' if i % 2 else 'dog'}\n" for i, r in enumerate(rels)))
    pack(photos, str(tmp_path / "o.h5"), labels_csv=str(labels))
    with feedline.open_dataset(str(tmp_path / "o.h5")) as ds:
        assert ds.classes == ["cat", "dog"]
        assert {ds.path(i): ds.label(i) for i in range(len(ds))} == \
            {r: (0 if i % 2 else 1) for i, r in enumerate(rels)}
        assert ds.meta["pack_options"]["labels_csv"] == str(labels)


# --- the command line ---------------------------------------------------------

def _cli(argv: list[str]) -> int:
    from feedline.cli import pack as cli_pack
    parser = argparse.ArgumentParser(prog="feedline")
    cli_pack.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["pack", *argv])
    return args.func(args)


def test_cli_maps_flags_and_prints_a_summary(mixed, tmp_path, capsys):
    out = str(tmp_path / "c.data")
    assert _cli([mixed[0], out, "--format", "lmdb", "--quality", "80", "--max-side", "40",
                 "--max-pixels", "5000000", "--jobs", "1"]) == 0
    printed = capsys.readouterr()
    assert "packed + skipped = found" in printed.out and printed.err == ""  # no bar: not a terminal
    with feedline.open_dataset(out) as ds:
        opts = ds.meta["pack_options"]
        assert (opts["quality"], opts["max_side"], opts["max_pixels"]) == (80, 40, 5_000_000)
        assert all(max(ds.size(i)) <= 40 for i in range(len(ds)))


def test_cli_quiet_and_fail(mixed, tmp_path, capsys):
    with pytest.raises(PackError):
        _cli([mixed[0], str(tmp_path / "q.lmdb"), "--on-error", "fail", "--quiet"])
    assert _cli([mixed[0], str(tmp_path / "q.lmdb"), "--quiet"]) == 0
    assert capsys.readouterr().out == ""


def test_cli_main_reports_errors_in_one_line(tmp_path, capsys, restore_logging):
    from feedline.cli import main
    assert main(["pack", str(tmp_path / "missing"), str(tmp_path / "o.lmdb")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such folder" in err[0]


# --- --check decode -------------------------------------------------------------

@pytest.fixture(scope="module")
def damaged_data(tmp_path_factory) -> str:
    """Photos plus one JPEG with valid headers and EOI whose entropy-coded data is cut
    in the middle: the header check passes it, libjpeg-turbo only warns."""
    from feedline.sample import make_photo_folder
    root = tmp_path_factory.mktemp("damaged") / "src"
    make_photo_folder(str(root), n=6, classes=2, seed=8, sizes=SIZES)
    whole = (root / "class_000" / "img_0000000.jpg").read_bytes()
    (root / "class_001" / "cut.jpg").write_bytes(whole[:len(whole) // 2] + whole[-2:])
    return str(root)


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_check_decode_skips_damaged_image_data_as_corrupt(damaged_data, tmp_path, ext):
    quick = pack(damaged_data, str(tmp_path / f"headers.{ext}"))
    assert quick.packed == 7 and quick.skipped == []  # headers only: it passes
    out = str(tmp_path / f"decoded.{ext}")
    report = pack(damaged_data, out, check="decode", jobs=2)
    assert report.packed == 6 and [(s.path, s.reason.value) for s in report.skipped] == [("class_001/cut.jpg", "corrupt")]
    assert "damaged image data" in report.skipped[0].detail
    with open(out + ".errors.csv", newline="") as fh:
        assert [r[:2] for r in csv.reader(fh)][1:] == [["class_001/cut.jpg", "corrupt"]]
    assert records(out) == [r for r in records(str(tmp_path / f"headers.{ext}")) if r[3] != "class_001/cut.jpg"]
    assert meta_without_created(out)["pack_options"]["check"] == "decode"


def test_cli_check_decode_and_no_space_check(damaged_data, tmp_path, capsys):
    assert _cli([damaged_data, str(tmp_path / "c.lmdb"), "--check", "decode", "--no-space-check"]) == 0
    assert "skipped: 1 (corrupt: 1)" in capsys.readouterr().out
    assert meta_without_created(str(tmp_path / "c.lmdb"))["pack_options"]["check"] == "decode"
