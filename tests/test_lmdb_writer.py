"""The LMDB writer's map: doubled when full, or grown at once to four times the chunk that did not
fit; full at a commit, the chunk is packed again; a resumed pack maps room to grow. Every
record's bytes are checked against its source file."""
from __future__ import annotations

import logging
import re

import cv2
import numpy as np
import pytest
from pack_helpers import MiB, interrupt_at, noise_jpeg, stored_as_sources

from converters import pack


def growth(caplog, out: str) -> list[int]:
    """The map sizes (MiB) that the pack of ``out`` grew its map to, in order."""
    said = [r.getMessage() for r in caplog.records if r.name == "converters.lmdb_writer"]
    sizes = [re.fullmatch(rf"{re.escape(out)}\.partial: map full, growing it to (\d+) MiB", s) for s in said]
    assert all(sizes), said
    return [int(m.group(1)) for m in sizes]


def test_lmdb_map_doubles_or_makes_room_for_four_times_the_lost_chunk(tmp_path, monkeypatch, caplog):
    import converters.lmdb_writer as lw
    caplog.set_level(logging.DEBUG, logger="converters")
    # Small records, one per commit, in a 1 MiB map: full after a few, then doubled each time.
    small = tmp_path / "small"
    for k in range(24):
        noise_jpeg(small / "c" / f"{k:02d}.jpg", 256, seed=k)
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", MiB)
    out = str(tmp_path / "s.lmdb")
    pack(str(small), out, commit_every=1)
    assert stored_as_sources(out, str(small)) == 24
    grown = growth(caplog, out)
    assert grown == [2 ** (k + 1) for k in range(len(grown))] and len(grown) >= 1
    # One record far larger than the map: grown at once to hold four times it, not doubled again and again.
    caplog.clear()
    large = tmp_path / "large"
    size = noise_jpeg(large / "c" / "big.jpg", 1400, seed=1)
    assert size > MiB
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", 64 << 10)
    out = str(tmp_path / "l.lmdb")
    pack(str(large), out)
    assert stored_as_sources(out, str(large)) == 1
    assert growth(caplog, out) == [((64 << 10) + 4 * size) >> 20]
    assert redone(caplog) == [f"{out}.partial: the LMDB map was full at record 0; packing again from file 0"]
    # A chunk of several records, full at its k-th: room for four times the whole chunk, not its last record.
    caplog.clear()
    several = tmp_path / "several"
    for k in range(6):
        noise_jpeg(several / "c" / f"{k}.jpg", 560, seed=k, size=300_000)
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", MiB)
    out = str(tmp_path / "m.lmdb")
    pack(str(several), out, commit_every=10)
    assert stored_as_sources(out, str(several)) == 6
    (said,) = redone(caplog)
    k = int(re.fullmatch(rf"{re.escape(out)}\.partial: the LMDB map was full at record (\d+); packing again "
                         r"from file 0", said).group(1)) + 1
    assert k > 1 and growth(caplog, out) == [(MiB + 4 * k * 300_000) >> 20]


def redone(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "converters.packer" and "packing again" in r.getMessage()]


def test_lmdb_map_full_at_the_commit_packs_the_chunk_again(tmp_path, monkeypatch, caplog):
    """The journal entry of a chunk of long paths does not fit where its images did: the whole
    chunk is added again in a larger map (a commit alone, without its images, would lose them)."""
    import converters.lmdb_writer as lw
    caplog.set_level(logging.DEBUG, logger="converters")
    deep = tmp_path / "src" / ("c" * 250) / ("d" * 250) / ("e" * 250) / ("f" * 250)
    ok, tiny = cv2.imencode(".jpg", np.full((8, 8, 3), 128, np.uint8))
    deep.mkdir(parents=True)
    for k in range(30):
        (deep / (f"{k:03d}" + "g" * 240 + ".jpg")).write_bytes(tiny.tobytes())
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", 64 << 10)
    out = str(tmp_path / "o.lmdb")
    pack(str(tmp_path / "src"), out)
    assert redone(caplog)[0] == f"{out}.partial: the LMDB map was full at a commit; packing again from file 0"
    assert stored_as_sources(out, str(tmp_path / "src")) == 30


def test_lmdb_resume_reopens_the_map_with_room_to_grow(tmp_path, monkeypatch, caplog):
    """A resumed LMDB pack maps twice its partial file: the rest (smaller than what is
    committed) goes in without the map filling, that is without packing a chunk twice."""
    import converters.lmdb_writer as lw
    src = tmp_path / "src"
    for k in range(6):
        noise_jpeg(src / "c" / f"{k}.jpg", 560, seed=k, size=300_000)
    monkeypatch.setattr(lw, "INITIAL_MAP_SIZE", 64 << 10)
    out = str(tmp_path / "o.lmdb")
    with monkeypatch.context() as m:
        interrupt_at(m, str(src), 5)
        with pytest.raises(KeyboardInterrupt):
            pack(str(src), out, commit_every=2, jobs=1)
    caplog.set_level(logging.DEBUG, logger="converters")
    caplog.clear()
    assert pack(str(src), out, commit_every=2, resume=True).resumed_from == 4
    assert growth(caplog, out) == [] and redone(caplog) == []
    assert stored_as_sources(out, str(src)) == 6
