"""Damaged JPEG data is a bad record in the loader (strict decoding), unless the store
proves at pack time that every record decodes (then the crop's region alone is decoded)."""
from __future__ import annotations

import shutil

import pytest
import torch

from converters import pack
from feedline import DecodeError, FeedLoader

BAD = "class_001/img_0000005.jpg"


def damage_entropy_data(path) -> None:
    """Keep every header byte; overwrite a stretch in the middle of the entropy-coded data with
    bytes that break the Huffman stream (libjpeg warns "Corrupt JPEG data" and goes on)."""
    data = bytearray(path.read_bytes())
    sos = data.index(b"\xff\xda")
    start = sos + (len(data) - sos) // 2
    data[start:start + 64] = b"\xff\x00\xff\xd3" * 16   # stuffed bytes and a misplaced restart marker
    path.write_bytes(bytes(data))


@pytest.fixture
def damaged_folder(photo_folder, tmp_path):
    root = tmp_path / "images"
    shutil.copytree(photo_folder, root)
    damage_entropy_data(root / BAD)
    return root


def bad_paths(loader) -> list[str]:
    for _ in loader:
        pass
    return [r.path for r in loader.stats.bad_records]


def test_damaged_data_is_a_bad_record_in_a_folder_and_a_default_pack(damaged_folder, tmp_path):
    packed = tmp_path / "headers-only.lmdb"
    pack(str(damaged_folder), str(packed))  # headers only: the damage gets in
    for source in (damaged_folder, packed):
        loader = FeedLoader(str(source), batch_size=8, size=32, device="cpu", on_error="substitute")
        assert loader.source.decoder.strict
        assert bad_paths(loader) == [BAD], source
        with pytest.raises(DecodeError, match=BAD):
            for _ in FeedLoader(str(source), batch_size=8, size=32, device="cpu"):
                pass


def test_a_store_checked_at_pack_time_is_decoded_leniently(photo_folder, damaged_folder, tmp_path):
    checked = tmp_path / "checked.h5"
    report = pack(str(damaged_folder), str(checked), check="decode")
    assert [s.path for s in report.skipped] == [BAD]  # the damage stayed out of the store
    loader = FeedLoader(str(checked), batch_size=8, size=32, device="cpu", seed=1, shuffle=True)
    assert not loader.source.decoder.strict
    strict = FeedLoader(str(pack(str(photo_folder), str(tmp_path / "plain.h5")).out), batch_size=8,
                        size=32, device="cpu", seed=1, shuffle=True)
    assert strict.source.decoder.strict
    lenient_batches = [x for x, _ in loader]
    assert len(lenient_batches) == len(loader) and loader.stats.bad_records == []
    # Same crops either way: the lenient region decode differs only by decoder rounding.
    paths = [checked_store_path for checked_store_path in map(loader.store.path, range(len(loader.store)))]
    assert BAD not in paths
    first = next(iter(strict))[0]
    assert first.shape == lenient_batches[0].shape and torch.isfinite(first).all()
