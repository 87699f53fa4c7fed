"""The packer: what a pack writes, reports and keeps (its metadata, bytes read and written, the
seed's order, commits by bytes), what it says (nothing packed, skipped files, a leftover
unfinished pack, an output it cannot write, --on-error fail), its progress bar, and that it
leaves no file open."""
from __future__ import annotations

import logging
import os
import re
import sys
import time

import pytest
from pack_helpers import Terminal, big, feedline_format, interrupt_at, interrupted, mixed, records_of, source_size

import feedline
from converters import pack
from feedline.core.errors import PackError


def test_nothing_packed_counts_the_reasons_and_names_the_first(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "e1.jpg").write_bytes(b"")
    (src / "a" / "e2.jpg").write_bytes(b"")
    (src / "a" / "t.jpg").write_text("hello" * 20)
    with pytest.raises(PackError) as err:
        pack(str(src), str(tmp_path / "o.lmdb"))
    assert str(err.value) == (f"{src}: none of the 3 image files could be packed (empty: 2, not-an-image: 1); "
                              "first: a/e1.jpg: empty: zero-byte file; nothing written")
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_the_progress_bar_counts_files_and_shows_the_read_rate(tmp_path, monkeypatch):
    from feedline.sample import make_photo_folder
    make_photo_folder(str(tmp_path / "src"), n=64, classes=2, seed=3, sizes=[(320, 240)])
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    pack(str(tmp_path / "src"), str(tmp_path / "o.lmdb"), jobs=1)
    last = screen.getvalue().split("\r")[-1]
    assert re.search(r"64/64 \[.*, (\d+\.\d) MiB/s\]", last), last   # the rate: every 64 files
    # Its value depends on the clock; bounds that no clock reading can break: some bytes were read,
    # and not at a TiB per second.
    assert 0 < float(re.search(r"(\d+\.\d) MiB/s", last).group(1)) < 2**20


def test_a_pack_reports_what_it_read_and_wrote_and_stamps_its_metadata(mixed, tmp_path, monkeypatch):
    import datetime
    import time

    from converters import PackOptions
    from feedline import __version__
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "Asia/Tokyo")   # the stamp is UTC whatever the machine's zone
    time.tzset()
    t0 = time.perf_counter()
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    try:   # a relative OUT, in a folder that does not exist yet; several commits
        report = pack(mixed, "rel/o.lmdb", jobs=1, commit_every=3)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    after = datetime.datetime.now(datetime.timezone.utc)
    took = time.perf_counter() - t0
    out = str(tmp_path / "rel" / "o.lmdb")
    assert (report.out, report.error_report, report.format) == (out, out + ".errors.csv", "lmdb")
    assert 0 < report.seconds <= took
    with feedline.open_dataset(out) as ds:
        paths = [ds.path(i) for i in range(len(ds))]
        meta = dict(ds.meta)
    assert report.bytes_in == sum(source_size(mixed, p) for p in paths)
    assert report.bytes_out == sum(len(r) for r in records_of(out))
    assert before <= datetime.datetime.fromisoformat(meta.pop("created")) <= after
    from converters.journal import scan_digest
    from feedline.dataset.scan import scan_folder
    assert meta.pop("input_digest") == scan_digest(scan_folder(mixed))
    assert meta == {"format": "feedline", "format_version": 2, "checksum": "xxh3_64", "count": 13,
                    "classes": ["class_000", "class_001"], "source": mixed, "feedline_version": __version__,
                    "pack_options": PackOptions().output_options(feedline_format("lmdb"))}


def test_a_shuffled_pack_holds_the_records_in_the_seeds_order(mixed, tmp_path):
    from feedline.dataset.scan import scan_folder, shuffled
    out = str(tmp_path / "s.h5")
    pack(mixed, out, shuffle=3)
    order = [p for p in shuffled(scan_folder(mixed), 3).paths if p not in ("class_000/empty.jpg", "class_001/text.png")]
    with feedline.open_dataset(out) as ds:
        assert [ds.path(i) for i in range(len(ds))] == order != sorted(order)
        assert ds.meta["pack_options"]["shuffle"] == 3


def test_commit_bytes_ends_a_chunk_before_commit_every(big, tmp_path, monkeypatch):
    from pack_helpers import committed
    out = str(tmp_path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, big, 6)
        with pytest.raises(KeyboardInterrupt):
            pack(big, out, commit_bytes=3_000_000, jobs=1)   # 1 MB files: a commit once 3 reach it
    assert committed(out) == 3
    out = str(tmp_path / "p.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, big, 6)
        with pytest.raises(KeyboardInterrupt):
            pack(big, out, commit_bytes=2_000_001, jobs=1)   # 2 files fall one byte short
    assert committed(out) == 3


def test_where_out_cannot_be_written_is_said_before_the_source_is_read(mixed, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PackError) as err:
        pack(str(tmp_path / "no-such-src"), str(tmp_path / "file" / "sub" / "o.lmdb"))
    assert str(err.value) == (f"{tmp_path / 'file' / 'sub'}: cannot create the output folder "
                              f"({tmp_path / 'file'} is a file, not a folder); choose a writable place for OUT")
    with pytest.raises(PackError) as err:
        pack(str(tmp_path / "no-such-src"), str(tmp_path), format="lmdb")
    assert str(err.value) == f"{tmp_path} is a folder; name an output file such as OUT.lmdb or OUT.h5"
    with pytest.raises(PackError, match="cannot tell the format from the extension"):
        pack(str(tmp_path / "no-such-src"), str(tmp_path / "o.txt"))
    os.symlink(tmp_path / "nowhere", tmp_path / "link.lmdb")
    with pytest.raises(PackError, match="already exists"):
        pack(str(tmp_path / "no-such-src"), str(tmp_path / "link.lmdb"))
    with pytest.raises(PackError) as err:
        pack(str(tmp_path / "no-such-src"), str(tmp_path / "file"), format="lmdb")
    assert str(err.value) == (f"{tmp_path / 'file'} already exists; pass --overwrite to replace it "
                              "(the old file stays until the new one is complete)")


def test_on_error_fail_names_the_file_the_reason_and_that_nothing_was_written(mixed, tmp_path):
    out = str(tmp_path / "o.h5")
    with pytest.raises(PackError) as err:
        pack(mixed, out, on_error="fail", commit_every=3)
    assert str(err.value) == (f"{os.path.join(mixed, 'class_000/empty.jpg')}: empty: zero-byte file "
                              f"(--on-error fail: stopped; nothing written at {out})")
    assert os.listdir(tmp_path) == []


def test_a_leftover_unfinished_pack_is_named_when_discarded(mixed, tmp_path, monkeypatch, caplog):
    for ext, first in (("lmdb", ".partial"), ("h5", ".partial.images")):
        out = str(tmp_path / f"o.{ext}")
        interrupted(mixed, out, monkeypatch)
        caplog.clear()
        pack(mixed, out)
        said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
        assert said == [f"{out}{first}: discarding an unfinished pack (pass --resume to continue it)"]


def test_out_made_a_folder_during_the_pack_is_a_write_failure_and_resume_finishes(mixed, tmp_path, monkeypatch):
    import converters.packer as packer
    from feedline.dataset.scan import scan_folder
    out = str(tmp_path / "o.lmdb")
    real, last = packer.check_file, scan_folder(mixed).paths[-1]

    def racing(root, rel, options):   # another process makes OUT a folder meanwhile
        if rel == last:
            os.mkdir(out)
        return real(root, rel, options)
    with monkeypatch.context() as m:
        m.setattr(packer, "check_file", racing)
        with pytest.raises(PackError) as err:
            pack(mixed, out, commit_every=3)
    assert str(err.value) == (f"{out}: write failed (Is a directory); what is committed is intact: "
                              "fix the cause and rerun with --resume")
    os.rmdir(out)
    assert pack(mixed, out, commit_every=3, resume=True).packed == 13


def test_each_skipped_file_is_logged_with_its_reason(mixed, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="converters.packer")
    pack(mixed, str(tmp_path / "o.lmdb"))
    said = [r.getMessage() for r in caplog.records if r.name == "converters.packer"]
    assert "skipped class_000/empty.jpg: empty: zero-byte file" in said
    assert [m for m in said if m.startswith("skipped ")][1].startswith("skipped class_001/text.png: not-an-image: ")


def open_files() -> set[str]:
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return fds


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_a_pack_finished_or_interrupted_leaves_no_file_open(mixed, tmp_path, monkeypatch, ext):
    before = open_files()
    out = str(tmp_path / f"o.{ext}")
    interrupted(mixed, out, monkeypatch)   # interrupted_h5 works for either format
    assert not {f for f in open_files() - before if f.startswith(str(tmp_path))}
    pack(mixed, out, commit_every=3, resume=True)
    assert not {f for f in open_files() - before if f.startswith(str(tmp_path))}


# -- targets checked against their images as they are packed ---------------------------------

def box_pack(tmp_path, boxes_of, commit_every: int = 2, num_shards: int | None = None):
    """Four 64 x 48 (width x height) photos with the boxes ``boxes_of(k)`` each, packed."""
    import json

    from feedline.sample import make_photo_folder
    src = tmp_path / "src"
    make_photo_folder(str(src), n=4, classes=1, seed=2, sizes=[(64, 48)])
    rels = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg"))
    labels = tmp_path / "boxes.jsonl"
    labels.write_text("".join(json.dumps({"path": r, "boxes": boxes_of(k)}) + "\n" for k, r in enumerate(rels)))
    out = tmp_path / "o.lmdb"
    extra = {} if num_shards is None else {"num_shards": num_shards}
    return rels, out, lambda: pack(str(src), str(out), labels_csv=str(labels), progress=False,
                                   commit_every=commit_every, **extra)


@pytest.mark.parametrize("box", [[-100, -100, -10, -10, "car"], [64, 10, 5000, 5000, "car"],
                                 [10, 48, 20, 60, "car"]])
def test_a_box_wholly_outside_its_image_is_refused_with_the_file_and_row(tmp_path, box):
    rels, out, run = box_pack(tmp_path, lambda k: [[1, 1, 9, 9, "dog"]] + ([box] if k == 2 else []))
    with pytest.raises(PackError, match=rf"boxes.jsonl: line 3 \({re.escape(rels[2])}\): box 1 .*: wholly "
                                        r"outside its 64x48 \(WxH\) image: correct it in the labels file"):
        run()
    assert not out.exists() and not os.path.exists(str(out) + ".partial")


def test_a_box_partly_outside_is_clipped_counted_and_the_store_verifies(tmp_path):
    from feedline.dataset.verify import verify
    rels, out, run = box_pack(tmp_path, lambda k: [[-5, 10, 20, 30, "car"], [10, 10, 5000, 5000, "dog"]][:k % 3])
    report = run()
    assert report.boxes_clipped == 3   # record 1: its one box; record 2: both
    assert "boxes partly outside their image, clipped to it: 3" in "\n".join(report.summary_lines())
    with feedline.open_dataset(str(out)) as ds:
        got = {ds.path(i): ds.targets(i)["boxes"] for i in range(len(ds))}
    assert got == {rels[0]: [], rels[1]: [[0, 10, 20, 30, 0]], rels[2]: [[0, 10, 20, 30, 0], [10, 10, 64, 48, 1]],
                   rels[3]: []}
    assert verify(str(out), mode="checksums").ok


def test_a_sharded_pack_adds_up_the_clipped_boxes(tmp_path):
    _, out, run = box_pack(tmp_path, lambda k: [[-5, 10, 20, 30, "car"]], num_shards=2)
    report = run()
    assert report.boxes_clipped == 4 and [r.boxes_clipped for r in report.shards] == [2, 2]


def test_max_side_is_refused_for_boxes_in_source_pixels(tmp_path):
    """A shrunk image would no longer match its boxes: refused before anything is written."""
    import json

    from feedline.sample import make_photo_folder
    src = tmp_path / "src"
    make_photo_folder(str(src), n=2, classes=1, seed=2, sizes=[(64, 48)])
    rels = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg"))
    labels = tmp_path / "b.jsonl"
    labels.write_text("".join(json.dumps({"path": r, "boxes": [[1, 1, 9, 9, "car"]]}) + "\n" for r in rels))
    with pytest.raises(PackError, match=r"b.jsonl: its boxes are in source pixels, and --max-side 32 would shrink"):
        pack(str(src), str(tmp_path / "o.lmdb"), labels_csv=str(labels), max_side=32, progress=False)
    assert not (tmp_path / "o.lmdb").exists()
    pack(str(src), str(tmp_path / "o.lmdb"), labels_csv=str(labels), progress=False)   # without: packed


# -- values exactly on the image's right or bottom edge, and just past it --------------------

def labels_pack(tmp_path, row_of, num: int = 2):
    """``num`` 64 x 48 (width x height) photos with the labels ``row_of(k)`` each (a dict of
    fields), packed to o.lmdb."""
    import json

    from feedline.sample import make_photo_folder
    src = tmp_path / "src"
    make_photo_folder(str(src), n=num, classes=1, seed=2, sizes=[(64, 48)])
    rels = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg"))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"path": r, **row_of(k)}) + "\n" for k, r in enumerate(rels)))
    out = tmp_path / "o.lmdb"
    return rels, out, lambda: pack(str(src), str(out), labels_csv=str(labels), progress=False)


def test_boxes_on_the_right_and_bottom_edges_are_kept_as_they_are(tmp_path):
    """x1 == width and y1 == height: inside (edges, not pixel centres), not clipped."""
    from feedline.dataset.verify import verify
    edge = [[0, 0, 64, 48, "car"], [54, 38, 64, 48, "car"], [63, 0, 64, 1, "car"], [0, 47, 1, 48, "car"]]
    rels, out, run = labels_pack(tmp_path, lambda k: {"boxes": edge if k == 0 else []})
    assert run().boxes_clipped == 0
    with feedline.open_dataset(str(out)) as ds:
        assert ds.targets(0)["boxes"] == [[*map(float, b[:4]), 0] for b in edge]
    assert verify(str(out), mode="checksums").ok


def test_boxes_just_past_the_right_and_bottom_edges_are_clipped_to_them(tmp_path):
    past = [[60, 40, 64.5, 48.25, "car"], [-0.5, -0.25, 4, 4, "car"], [63.5, 47.5, 64.001, 48.001, "car"]]
    rels, out, run = labels_pack(tmp_path, lambda k: {"boxes": past if k == 1 else []})
    assert run().boxes_clipped == 3
    with feedline.open_dataset(str(out)) as ds:
        assert ds.targets(1)["boxes"] == [[60, 40, 64, 48, 0], [0, 0, 4, 4, 0], [63.5, 47.5, 64, 48, 0]]


@pytest.mark.parametrize("box", [[64, 0, 70, 10, "car"], [0, 48, 10, 50, "car"], [64, 48, 65, 49, "car"],
                                 [64.001, 0, 70, 10, "car"]])
def test_a_box_that_starts_on_the_right_or_bottom_edge_has_nothing_inside_and_is_refused(tmp_path, box):
    rels, out, run = labels_pack(tmp_path, lambda k: {"boxes": [box] if k == 1 else []})
    with pytest.raises(PackError, match=rf"line 2 \({re.escape(rels[1])}\): box 0 .*: wholly outside its 64x48 "
                                        r"\(WxH\) image"):
        run()
    assert not out.exists()


def test_keypoints_on_the_right_and_bottom_edges_are_kept(tmp_path):
    """A point at x == width or y == height lies on the image's edge: labelled there, it packs
    and verifies; one past the edge not labelled (visible 0) packs too."""
    from feedline.dataset.verify import verify
    points = [[64, 48, 2], [64, 0, 1], [0, 48, 2], [0, 0, 2], [70, 50, 0]]
    rels, out, run = labels_pack(tmp_path, lambda k: {"keypoints": points if k == 0 else [[1, 1, 2]] * 5})
    run()
    with feedline.open_dataset(str(out)) as ds:
        assert ds.targets(0)["keypoints"] == [[float(v) for v in p] for p in points]
    assert verify(str(out), mode="checksums").ok


@pytest.mark.parametrize("point", [[64.001, 10, 2], [10, 48.001, 1], [64.5, 48.5, 2], [-0.001, 10, 2]])
def test_a_labelled_keypoint_just_past_an_edge_is_refused(tmp_path, point):
    rels, out, run = labels_pack(tmp_path, lambda k: {"keypoints": [[1, 1, 2], point] if k == 1 else [[1, 1, 2]] * 2})
    with pytest.raises(PackError, match=rf"line 2 \({re.escape(rels[1])}\): keypoint 1 .* is labelled but outside "
                                        r"its 64x48 \(WxH\) image"):
        run()
    assert not out.exists()
