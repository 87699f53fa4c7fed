"""`feedline info` and `feedline verify`: the library functions and the commands."""
from __future__ import annotations

import json
import os

import pytest
from storefiles import WRITERS, jpeg, make_records, write_lmdb

from feedline import cli
from feedline.dataset.describe import describe, format_info
from feedline.dataset.format import LABEL_ONLY_VERSION, LMDB_IMAGE_PREFIX
from feedline.sample import make_photo_folder
from feedline.dataset.verify import Problem, VerifyResult, strict_decoder, verify

KINDS = ("lmdb", "hdf5")


@pytest.fixture(scope="module")
def records():
    return make_records(n=12, classes=3)


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def main(monkeypatch, capsys):
    """Run `feedline ARGS...` in-process; returns (exit code, stdout, stderr)."""
    def run(*argv: str):
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err
    return run


def damaged(records, **changes):
    """A copy of ``records`` with some fields replaced, e.g. labels=[...]."""
    from dataclasses import replace
    return replace(records, **{k: list(v) for k, v in changes.items()})


# -- info ----------------------------------------------------------------------------------------

def test_describe_fields(tmp_path, records, kind):
    path = WRITERS[kind](tmp_path / f"d.{kind}", records)
    info = describe(path)
    assert info.kind == kind
    assert info.format_version == LABEL_ONLY_VERSION
    assert info.filename == os.path.abspath(path)
    assert info.file_bytes == os.path.getsize(path)
    assert info.count == 12
    assert [(c.label, c.name, c.count) for c in info.classes] == [(0, "class_0", 4), (1, "class_1", 4),
                                                                  (2, "class_2", 4)]
    assert info.labels_out_of_range == 0
    assert info.image_bytes == sum(len(b) for b in records.images)
    assert info.mean_image_bytes == pytest.approx(info.image_bytes / 12)
    heights = sorted(h for h, _ in records.sizes)
    widths = sorted(w for _, w in records.sizes)
    assert (info.height.min, info.height.max) == (heights[0], heights[-1])
    assert (info.width.min, info.width.max) == (widths[0], widths[-1])
    assert info.height.median == pytest.approx((heights[5] + heights[6]) / 2)
    assert info.pack_options == records.pack_options
    assert info.source == "/data/src"
    assert info.created == "2024-01-02T03:04:05Z"
    assert info.feedline_version == "0.1.0"


def test_describe_counts_labels_out_of_range(tmp_path, records):
    bad = damaged(records, labels=[0, 1, 2, 7, -1] + records.labels[5:])
    info = describe(write_lmdb(tmp_path / "bad.lmdb", bad))
    assert info.labels_out_of_range == 2
    assert sum(c.count for c in info.classes) == 10
    assert "bad labels" in format_info(info)


def test_describe_folder(tmp_path):
    make_photo_folder(str(tmp_path / "photos"), n=4, classes=2, seed=3)
    info = describe(tmp_path / "photos")
    assert info.kind == "folder"
    assert info.format_version is None
    assert info.count == 4
    assert [c.count for c in info.classes] == [2, 2]
    files = [p for p in (tmp_path / "photos").rglob("*.jpg")]
    assert info.image_bytes == info.file_bytes == sum(p.stat().st_size for p in files)
    assert info.height.min > 0


def test_info_table(tmp_path, records, main):
    path = write_lmdb(tmp_path / "t.lmdb", records)
    code, out, _ = main("info", path)
    assert code == 0
    assert f"lmdb (format version {LABEL_ONLY_VERSION})" in out
    assert "records" in out and " 12" in out
    assert "class_2" in out
    assert "min 16, median" in out
    assert "quality=90" in out
    assert "2024-01-02T03:04:05Z" in out


def test_info_table_lists_at_most_max_classes(tmp_path, main):
    path = write_lmdb(tmp_path / "many.lmdb", make_records(n=8, classes=8))
    _, out, _ = main("info", path, "--max-classes", "3")
    assert "class_2" in out and "class_3" not in out
    assert "5 more" in out


def test_info_json(tmp_path, records, kind, main):
    path = WRITERS[kind](tmp_path / f"j.{kind}", records)
    code, out, _ = main("info", path, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["kind"] == kind
    assert data["format_version"] == LABEL_ONLY_VERSION
    assert data["checksums"] is True and data["shards"] == []
    assert data["count"] == 12
    assert data["classes"][1] == {"label": 1, "name": "class_1", "count": 4}
    assert data["image_bytes"] == sum(len(b) for b in records.images)
    assert data["file_bytes"] == os.path.getsize(path)
    assert set(data["height"]) == {"min", "median", "max"}
    assert data["pack_options"] == records.pack_options
    assert data["created"] == "2024-01-02T03:04:05Z"


def test_info_on_a_non_store_exits_2(tmp_path, main):
    (tmp_path / "x.lmdb").write_text("hello")
    code, out, err = main("info", tmp_path / "x.lmdb")
    assert code == 2
    assert "x.lmdb" in err and "not a feedline store" in err


# -- verify --------------------------------------------------------------------------------------

def test_verify_passes_on_a_good_file(tmp_path, records, kind, main):
    path = WRITERS[kind](tmp_path / f"good.{kind}", records)
    seen = []
    result = verify(path, jobs=2, on_progress=lambda done, total: seen.append((done, total)))
    assert isinstance(result, VerifyResult)
    assert result.ok and result.problems == []
    auto = strict_decoder("auto").name
    assert (result.count, result.decoded, result.checksummed, result.kind, result.decoder) == (12, 12, 12, kind, auto)
    assert result.has_checksums and result.mode == "full"
    assert seen[-1] == (12, 12)
    code, out, _ = main("verify", path, "--jobs", "2")
    assert code == 0
    assert out.count("\n") == 1 and out.startswith("OK: ") and "12 records" in out


def test_verify_catches_a_garbage_record(tmp_path, records, kind, main):
    images = list(records.images)
    images[5] = b"this is not an image at all" * 10
    path = WRITERS[kind](tmp_path / f"garbage.{kind}", damaged(records, images=images))
    result = verify(path, jobs=2)
    assert not result.ok
    assert [(p.index, p.path) for p in result.problems] == [(5, "class_2/img_005.jpg")]
    assert "does not decode" in result.problems[0].problem
    assert (result.decoded, result.checksummed) == (11, 12)  # what decoded, not the record count
    code, out, _ = main("verify", path)
    assert code == 1
    assert "record 5 (class_2/img_005.jpg): does not decode" in out
    assert out.splitlines()[-1].startswith("FAILED: ") and "1 bad record(s) of 12" in out


def test_verify_catches_a_truncated_jpeg(tmp_path, records, kind):
    """libjpeg-turbo only warns about a JPEG cut short and returns a part-gray image."""
    images = list(records.images)
    big = jpeg(64, 64, seed=9)
    images[2] = big[:len(big) // 2]
    path = WRITERS[kind](tmp_path / f"cut.{kind}", damaged(records, images=images,
                                                     sizes=records.sizes[:2] + [(64, 64)] + records.sizes[3:]))
    result = verify(path, jobs=1)
    assert [p.index for p in result.problems] == [2]


def test_verify_treats_damaged_image_data_as_a_bad_record(tmp_path, records, kind, main):
    """Valid headers and EOI, entropy-coded data cut in the middle: libjpeg-turbo only
    warns ("premature end of data segment") and returns a part-gray image."""
    images = list(records.images)
    whole = jpeg(64, 64, seed=3)
    images[7] = whole[:len(whole) // 2] + whole[-2:]
    sizes = records.sizes[:7] + [(64, 64)] + records.sizes[8:]
    path = WRITERS[kind](tmp_path / f"entropy.{kind}", damaged(records, images=images, sizes=sizes))
    result = verify(path, jobs=2)
    assert [p.index for p in result.problems] == [7] and result.decoded == 11
    assert "does not decode" in result.problems[0].problem
    assert verify(path, jobs=2, mode="checksums").ok  # its checksum was taken of the damaged bytes
    code, out, _ = main("verify", path)
    assert code == 1 and "record 7 (class_1/img_007.jpg): does not decode" in out


def test_verify_help_states_the_real_default_decoder(main, capsys):
    with pytest.raises(SystemExit):
        main("verify", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "default auto" in text and "default turbojpeg" not in text and "--checksums-only" in text


def test_verify_catches_labels_out_of_range(tmp_path, records, kind, main):
    labels = list(records.labels)
    labels[3], labels[7] = 3, -1
    path = WRITERS[kind](tmp_path / f"labels.{kind}", damaged(records, labels=labels))
    result = verify(path, jobs=2)
    assert [(p.index, p.path) for p in result.problems] == [(3, "class_0/img_003.jpg"), (7, "class_1/img_007.jpg")]
    assert "label 3 outside 0..2" in result.problems[0].problem
    code, out, _ = main("verify", path)
    assert code == 1
    assert "record 7 (class_1/img_007.jpg): label -1 outside 0..2" in out


def test_verify_catches_a_size_mismatch(tmp_path, records, kind, main):
    sizes = list(records.sizes)
    sizes[4] = (sizes[4][0] + 1, sizes[4][1])
    path = WRITERS[kind](tmp_path / f"size.{kind}", damaged(records, sizes=sizes))
    result = verify(path, jobs=2)
    assert [p.index for p in result.problems] == [4]
    h, w = records.sizes[4]
    assert f"decodes to {h}x{w} (HxW), the sizes column says {h + 1}x{w}" in result.problems[0].problem
    code, _, _ = main("verify", path)
    assert code == 1


def test_verify_catches_missing_and_extra_lmdb_records(tmp_path, records, main):
    extra = {LMDB_IMAGE_PREFIX + b"%010d" % 12: records.images[0]}
    path = write_lmdb(tmp_path / "gaps.lmdb", records, skip=(0, 9), extra_keys=extra)
    result = verify(path, jobs=2)
    assert [p.index for p in result.problems] == [None, 0, 9]
    assert "beyond the 12 records" in result.problems[0].problem
    assert "missing" in result.problems[1].problem
    code, out, _ = main("verify", path)
    assert code == 1
    assert out.startswith("file: ") and "2 bad record(s) of 12, 1 file problem(s)" in out


def test_verify_results_do_not_depend_on_threads(tmp_path, records, kind):
    images, labels = list(records.images), list(records.labels)
    images[1] = images[8] = b"\xff\xd8\xff garbage"
    labels[10] = 99
    path = WRITERS[kind](tmp_path / f"many.{kind}", damaged(records, images=images, labels=labels))
    one, three = verify(path, jobs=1), verify(path, jobs=3)
    assert one.problems == three.problems
    assert [p.index for p in one.problems] == [1, 8, 10]


def test_verify_a_file_that_will_not_open(tmp_path, records, kind, main):
    path = WRITERS[kind](tmp_path / f"short.{kind}", records)
    os.truncate(path, os.path.getsize(path) // 2)
    result = verify(path, jobs=1)
    assert not result.ok and result.kind == "unknown"
    assert result.problems == [Problem(None, None, result.problems[0].problem)]
    assert "truncated" in result.problems[0].problem
    code, out, _ = main("verify", path)
    assert code == 1
    assert f"short.{kind}" in out and "truncated" in out


def test_verify_missing_path_and_bad_arguments_exit_2(tmp_path, main):
    code, _, err = main("verify", tmp_path / "nope.lmdb")
    assert code == 2 and "no such file" in err
    with pytest.raises(SystemExit) as info:
        main("verify", tmp_path / "nope.lmdb", "--jobs", "0")
    assert info.value.code == 2


def test_verify_lists_at_most_max_listed(tmp_path, records, main):
    path = write_lmdb(tmp_path / "labels.lmdb", damaged(records, labels=[5] * 12))
    code, out, _ = main("verify", path, "--max-listed", "3")
    assert code == 1
    assert out.count("outside 0..2") == 3
    assert "9 more problems" in out


def test_verify_json(tmp_path, records, main):
    path = write_lmdb(tmp_path / "j.lmdb", damaged(records, labels=[0] * 11 + [3]))
    code, out, _ = main("verify", path, "--json", "--jobs", "1")
    assert code == 1
    data = json.loads(out)
    assert data["ok"] is False and data["count"] == 12 and data["jobs"] == 1
    assert data["problems"] == [{"index": 11, "path": "class_2/img_011.jpg",
                                 "problem": "label 3 outside 0..2 (3 classes)"}]


def test_verify_folder(tmp_path, main):
    make_photo_folder(str(tmp_path / "photos"), n=4, classes=2, seed=5)
    result = verify(tmp_path / "photos", jobs=2)
    assert result.ok and result.kind == "folder" and result.count == 4
    (tmp_path / "photos" / "class_001" / "broken.jpg").write_bytes(b"\xff\xd8 nope")
    code, out, _ = main("verify", tmp_path / "photos")
    assert code == 1
    assert "class_001/broken.jpg" in out


def test_info_and_verify_on_a_packed_folder(tmp_path, main):
    """End to end with the real writer."""
    import converters
    make_photo_folder(str(tmp_path / "photos"), n=5, classes=2, seed=7)
    for suffix in (".lmdb", ".h5"):
        out = tmp_path / f"packed{suffix}"
        converters.pack(str(tmp_path / "photos"), str(out))
        info = describe(out)
        assert info.count == 5 and [c.name for c in info.classes] == ["class_000", "class_001"]
        assert info.kind == ("lmdb" if suffix == ".lmdb" else "hdf5")
        code, text, _ = main("verify", out)
        assert code == 0, text
