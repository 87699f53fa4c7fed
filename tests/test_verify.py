"""`feedline verify` (feedline/dataset/verify.py), as documented: its exact summaries and JSON, a Store,
a list or a glob of shards given to it, the failed result of a data set that will not open, a
decoder instance used as it is (and what its failures and wrong shapes become), decoders without
a strict mode, the default thread count, and files of more chunks than the threads keep in flight
(counts, problems and progress added up across them)."""
from __future__ import annotations

import glob
import json
import logging
import os
import re
import shutil
import threading
import time

import numpy as np
import pytest
from storefiles import make_records, write_lmdb

import feedline
from converters import PackOptions, pack
from feedline import cli
from feedline.decoders.base import Decoder
from feedline.core.errors import DecodeError, FeedlineError, StoreError
from feedline.sample import make_photo_folder
from feedline.dataset.verify import CHUNK, Problem, strict_decoder, verify

N_MANY = 300   # five chunks of CHUNK=64: more than one thread keeps in flight (4 per thread)
RESULT_KEYS = {"filename", "kind", "ok", "count", "decoded", "checksummed", "has_checksums", "mode", "decoder",
               "jobs", "seconds", "problems", "jpeg_warnings"}


@pytest.fixture(scope="module")
def auto() -> str:
    return strict_decoder("auto").name


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> str:
    return write_lmdb(tmp_path_factory.mktemp("clean") / "clean.lmdb", make_records(n=12, classes=3))


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """300 records: garbage at 0 and 250 (first and last chunk), label 7 of 3 classes at 1."""
    records = make_records(n=N_MANY, classes=3)
    records.images[0] = records.images[250] = b"not a jpeg at all " * 8
    records.labels[1] = 7
    return write_lmdb(tmp_path_factory.mktemp("many") / "many.lmdb", records), records


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[str]:
    """A real sharded pack: 6 photos in 2 shards of 3."""
    root = tmp_path_factory.mktemp("shards")
    make_photo_folder(str(root / "photos"), n=6, classes=2, seed=4)
    pack(str(root / "photos"), str(root / "s.lmdb"), PackOptions(shard_records=3))
    return sorted(glob.glob(str(root / "s-*.lmdb")))


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().out


def timed(**kw):
    """verify(**kw), and how long the call took: a result's seconds lie within it."""
    t0 = time.perf_counter()
    result = verify(**kw)
    return result, time.perf_counter() - t0


class Recording(Decoder):
    """A strict real decoder, noting the threads it runs on; ``gate`` (bytes, Event) makes the
    decode of those bytes wait until the event is set (by the progress callback)."""

    name = "recording"

    def __init__(self, gate=None):
        self.inner, self.gate = strict_decoder("auto"), gate
        self.threads: set[str] = set()
        self.waited_in_vain = False

    def decode(self, data):
        self.threads.add(threading.current_thread().name)
        if self.gate is not None and bytes(data) == self.gate[0]:
            self.waited_in_vain = not self.gate[1].wait(timeout=20)
        return self.inner.decode(data)


class Odd(Decoder):
    """A user's own backend: returns what ``make(data)`` returns (or raises what it raises)."""

    name = "odd"

    def __init__(self, make):
        self.make = make

    def decode(self, data):
        return self.make(data)


# -- summaries and JSON, as the command prints them -----------------------------------------------

def test_summaries_say_exactly_what_was_checked(tmp_path, clean, auto, capsys):
    tail = r"labels in range \(\d+\.\d s, 2 threads"
    code, out = run_cli(capsys, "verify", clean, "--jobs", "2")
    assert code == 0 and re.fullmatch(rf"OK: {re.escape(clean)} \(lmdb\): 12 records match their checksums, "
                                      rf"decode with {auto} to their stated sizes, {tail}\)\n", out), out
    code, out = run_cli(capsys, "verify", clean, "--jobs", "2", "--checksums-only")
    assert code == 0 and re.fullmatch(rf"OK: {re.escape(clean)} \(lmdb\): 12 records match their checksums, "
                                      rf"{tail}\)\n", out), out
    records = make_records(n=12, classes=3)
    old = write_lmdb(tmp_path / "v1.lmdb", records, records.v1_meta())
    code, out = run_cli(capsys, "verify", old, "--jobs", "2")
    assert code == 0 and re.fullmatch(rf"OK: {re.escape(old)} \(lmdb\): 12 records decode with {auto} to their "
                                      rf"stated sizes, {tail}; no checksums in this file\)\n", out), out
    make_photo_folder(str(tmp_path / "photos"), n=4, classes=2, seed=5)
    folder = str(tmp_path / "photos")
    code, out = run_cli(capsys, "verify", folder, "--jobs", "2")
    assert code == 0 and re.fullmatch(rf"OK: {re.escape(folder)} \(folder\): 4 records decode with {auto} to their "
                                      rf"stated sizes, {tail}\)\n", out), out


def test_a_failed_summary_counts_file_problems_only_when_there_are_some(tmp_path, capsys):
    records = make_records(n=12, classes=3)
    records.labels[4] = 9
    path = write_lmdb(tmp_path / "label.lmdb", records)
    code, out = run_cli(capsys, "verify", path)
    assert code == 1
    assert out.splitlines()[-1] == f"FAILED: {path} (lmdb): 1 bad record(s) of 12"


def test_json_has_every_field(clean, auto, capsys):
    for flag, mode, decoder, decoded in ((), "full", auto, 12), (("--checksums-only",), "checksums", "none", 0):
        code, out = run_cli(capsys, "verify", clean, "--json", "--jobs", "2", *flag)
        data = json.loads(out)
        assert code == 0 and set(data) == RESULT_KEYS
        assert data.pop("seconds") >= 0
        assert data == {"filename": clean, "kind": "lmdb", "ok": True, "count": 12, "decoded": decoded,
                        "checksummed": 12, "has_checksums": True, "mode": mode, "decoder": decoder, "jobs": 2,
                        "problems": [], "jpeg_warnings": 0}


def test_the_messages_that_say_what_to_do_instead(tmp_path):
    make_photo_folder(str(tmp_path / "photos"), n=2, classes=1, seed=2)
    with pytest.raises(FeedlineError) as err:
        verify(tmp_path / "photos", mode="checksums")
    assert str(err.value) == (f"{tmp_path / 'photos'}: an image folder has no checksums; verify it without "
                              "--checksums-only (decodes every image), or pack it first")
    records = make_records(n=4, classes=2)
    old = write_lmdb(tmp_path / "v1.lmdb", records, records.v1_meta())
    result = verify(old, jobs=1, mode="checksums")
    assert result.problems == [Problem(None, None, "no checksums to check (format version 1, packed before "
                                                   "checksums): verify without --checksums-only to decode every "
                                                   "record, or pack the image folder again to add checksums")]
    with pytest.raises(ValueError, match=r"^jobs must be >= 1, got 0$"):
        verify(old, jobs=0)


# -- what verify is given ------------------------------------------------------------------------

def test_an_open_store_is_verified_and_left_open(clean, auto):
    with feedline.open_dataset(clean) as store:
        seen = []
        result, took = timed(dataset=store, jobs=2, on_progress=lambda d, t: seen.append((d, t)))
        assert result.ok and (result.filename, result.count, result.decoded, result.checksummed) == (clean, 12, 12, 12)
        assert (result.jobs, result.decoder, result.mode) == (2, auto, "full")
        assert seen[0] == (0, 12) and seen[-1] == (12, 12)
        assert 0 <= result.seconds <= took
        only = verify(store, jobs=1, mode="checksums")
        assert only.ok and (only.decoded, only.checksummed, only.decoder, only.mode) == (0, 12, "none", "checksums")
        assert bytes(store.read(0)) == make_records(n=12, classes=3).images[0]


def test_a_glob_of_shards_and_a_list_of_them(shards, tmp_path):
    pattern = shards[0].replace("-00000-", "-*-")
    assert not os.path.exists(pattern)
    by_glob = verify(pattern, jobs=1)
    assert by_glob.ok and by_glob.count == 6 and by_glob.checksummed == by_glob.decoded == 6
    assert verify(shards, jobs=1).ok
    with pytest.raises(StoreError, match="no such file or folder"):
        verify(str(tmp_path / "none-*.lmdb"), jobs=1)


@pytest.mark.parametrize("mode", ["full", "checksums"])
def test_a_list_of_shards_that_will_not_open_is_a_failed_result(shards, tmp_path, auto, mode):
    copies = [shutil.copy(s, tmp_path) for s in shards]
    os.truncate(copies[1], 100)
    result, took = timed(dataset=copies, jobs=3, mode=mode)
    assert 0 <= result.seconds <= took
    data = result.to_dict()
    (problem,) = data.pop("problems")
    assert problem["index"] is None and problem["path"] is None and copies[1] in problem["problem"]
    del data["seconds"]
    assert data == {"filename": ", ".join(copies), "kind": "unknown", "ok": False, "count": 0, "decoded": 0,
                    "checksummed": 0, "has_checksums": False, "mode": mode,
                    "decoder": auto if mode == "full" else "none", "jobs": 3, "jpeg_warnings": 0}


def test_default_jobs_is_the_usable_cores_or_the_core_count_where_affinity_is_unknown(clean, monkeypatch):
    assert verify(clean, mode="checksums").jobs == len(os.sched_getaffinity(0))
    monkeypatch.delattr(os, "sched_getaffinity")       # macOS, Windows
    assert verify(clean, mode="checksums").jobs == os.cpu_count()
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # a platform that cannot tell
    assert verify(clean, mode="checksums").jobs == 1


# -- decoders ------------------------------------------------------------------------------------

def test_a_decoder_without_a_strict_mode_is_used_and_said_so(clean, caplog):
    caplog.set_level(logging.INFO, logger="feedline.decoders.selection")
    assert strict_decoder("auto").strict is True
    assert not [r for r in caplog.records if "strict" in r.getMessage()]
    result = verify(clean, decoder="opencv", jobs=1)
    assert result.ok and result.decoder == "opencv" and result.decoded == 12
    said = [r.getMessage() for r in caplog.records if r.name == "feedline.decoders.selection"]
    assert said == ["decoder 'opencv' has no strict mode: damaged image data may pass as decoded"]


def test_a_decoder_instance_is_used_as_it_is_and_its_failures_are_problems(tmp_path):
    records = make_records(n=6, classes=2)
    h, w = records.sizes[0]
    path = write_lmdb(tmp_path / "odd.lmdb", records)
    first = records.images[0]

    def odd(make):
        (problem,) = verify(path, decoder=Odd(lambda d: make() if d == first else np.zeros((*records.sizes[
            records.images.index(bytes(d))], 3), np.uint8)), jobs=1).problems
        assert (problem.index, problem.path) == (0, records.paths[0])
        return problem.problem

    def boom():
        raise RuntimeError("boom")
    assert odd(boom) == "does not decode with odd: RuntimeError: boom"
    with pytest.raises(DecodeError) as err:
        strict_decoder("auto").decode(b"not a jpeg")

    def feedline_error():
        raise err.value
    assert odd(feedline_error) == f"does not decode with odd: {err.value}"
    assert odd(lambda: np.zeros((h, w), np.uint8)) == f"decoded to shape {(h, w)}, expected H x W x 3"
    assert odd(lambda: np.zeros((h, w, 4), np.uint8)) == f"decoded to shape {(h, w, 4)}, expected H x W x 3"
    assert odd(lambda: [[0]]) == "decoded to shape None, expected H x W x 3"


# -- more chunks than are kept in flight ---------------------------------------------------------

def test_counts_problems_and_progress_add_up_over_every_chunk(many):
    path, records = many
    gate = (records.images[CHUNK], threading.Event())   # the second chunk's first record
    dec = Recording(gate)
    seen = []

    def progress(done, total):
        seen.append((done, total))
        if done >= CHUNK:
            gate[1].set()
    result = verify(path, decoder=dec, jobs=1, on_progress=progress)
    assert [p.index for p in result.problems] == [0, 1, 250]
    assert result.problems[1].problem == "label 7 outside 0..2 (3 classes)"
    assert (result.count, result.decoded, result.checksummed, result.decoder) == (N_MANY, N_MANY - 2, N_MANY,
                                                                                  "recording")
    # One call per chunk as it finishes (chunks done together come in any order), adding its records.
    assert seen[0] == (0, N_MANY) and seen[-1] == (N_MANY, N_MANY) and {t for _, t in seen} == {N_MANY}
    steps = [b - a for (a, _), (b, _) in zip(seen, seen[1:])]
    assert sorted(steps) == [N_MANY % CHUNK] + [CHUNK] * (N_MANY // CHUNK)
    assert not dec.waited_in_vain, "progress was not reported as the first chunk finished"
    (thread,) = dec.threads   # --jobs 1: one thread, named for py-spy and thread dumps
    assert thread.startswith("feedline-verify")


# -- boxes and keypoints exactly on the image's right or bottom edge, and just past it -------

def _with_targets(tmp_path, fields: dict, columns: dict[str, np.ndarray]) -> str:
    """A packed store of two 64 x 48 (width x height) photos whose target columns are then
    written over with ``columns`` (values pack itself refuses or clips), as damage would."""
    import lmdb

    from feedline.dataset.format import LMDB_COLUMN_PREFIX
    src = tmp_path / "src"
    make_photo_folder(str(src), n=2, classes=1, seed=4, sizes=[(64, 48)])
    rels = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg"))
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"path": r, **fields}) + "\n" for r in rels))
    out = str(tmp_path / "o.lmdb")
    pack(str(src), out, PackOptions(labels_csv=str(labels), progress=False))
    env = lmdb.open(out, subdir=False, lock=False)
    with env.begin(write=True) as txn:
        for name, values in columns.items():
            txn.put(LMDB_COLUMN_PREFIX + name.encode(), values.tobytes())
    env.close()
    return out


def test_verify_passes_boxes_ending_on_the_edges_and_flags_those_starting_there(tmp_path):
    boxes = np.array([[0, 0, 64, 48], [54, 38, 64, 48],          # record 0: to the right and bottom edges
                      [64, 0, 70, 10], [0, 48, 10, 50],          # record 1: starting on them: nothing inside
                      [64.25, 0, 70, 10]], dtype=np.float32)     # record 1: just past
    out = _with_targets(tmp_path, {"boxes": [[1, 1, 9, 9, "car"]] * 3},   # max 3 per record
                        {"box_offsets": np.array([0, 2, 5], dtype=np.int64), "box_coords": boxes.reshape(-1),
                         "box_classes": np.zeros(5, dtype=np.int32)})
    result = verify(out, mode="checksums")
    assert [(p.index, p.problem) for p in result.problems] == [
        (1, f"box {k} {[*boxes[2 + k].tolist(), 0]}: wholly outside its 64x48 (WxH) image as packed (turned by its "
            "EXIF orientation, if it had one)") for k in range(3)]


def test_verify_passes_keypoints_on_the_edges_and_flags_those_just_past(tmp_path):
    points = np.array([[[64, 48, 2], [64, 0, 1], [0, 48, 2]],             # record 0: on the edges
                       [[64.25, 10, 2], [10, 48.25, 1], [70, 50, 0]]],    # record 1: just past; not labelled
                      dtype=np.float32)
    out = _with_targets(tmp_path, {"keypoints": [[1, 1, 2]] * 3}, {"keypoints": points.reshape(-1)})
    result = verify(out, mode="checksums")
    assert [(p.index, p.problem) for p in result.problems] == [
        (1, f"keypoint {k} {points[1, k].tolist()} is labelled but outside its 64x48 (WxH) image as packed "
            "(turned by its EXIF orientation, if it had one)") for k in range(2)]
