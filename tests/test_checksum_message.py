"""The loader's error for a record whose bytes changed on disk names the record once and says
what to do once (issue 23, item 6: it said both twice, the store's words inside the loader's)."""
from __future__ import annotations

import pytest

from converters import pack
from feedline import FeedLoader, open_dataset
from feedline.core.errors import DecodeError
from feedline.sample import make_photo_folder


def flip_record(path: str, index: int) -> str:
    """Flip 64 bytes in the middle of record ``index`` where the file stores it; its path.
    Every copy: LMDB may keep a stale one in a free page (a chunk redone after its map grew)."""
    with open_dataset(path) as store:
        record, rel = bytes(store.read(index)), store.path(index)
    data = open(path, "rb").read()
    middle = record[len(record) // 2:len(record) // 2 + 64]
    assert data.count(middle) >= 1
    with open(path, "wb") as fh:
        fh.write(data.replace(middle, bytes(b ^ 0x5A for b in middle)))
    return rel


@pytest.mark.parametrize("layout", ["lmdb", "h5", "sharded"])
def test_a_checksum_mismatch_says_the_record_and_the_advice_once(tmp_path, layout):
    make_photo_folder(str(tmp_path / "src"), n=8, classes=2, seed=0, sizes=[(64, 48)])
    if layout == "sharded":
        report = pack(str(tmp_path / "src"), str(tmp_path / "out.lmdb"), num_shards=2)
        source, shard = report.out, report.shards[1].out
        rel = flip_record(shard, 1)
        index = report.shards[0].packed + 1
    else:
        source = shard = pack(str(tmp_path / "src"), str(tmp_path / f"out.{layout}")).out
        index = 3
        rel = flip_record(source, index)
    with pytest.raises(DecodeError) as info:
        for _ in FeedLoader(source, batch_size=8, size=32, device="cpu", order="sequential"):
            pass
    message = str(info.value)
    assert (info.value.index, info.value.path) == (index, rel)
    assert message.startswith(f"record {index} ({rel}) of {source}: checksum mismatch: ")
    for once in (f"({rel})", "checksum mismatch", "on_error='substitute'", "feedline verify",
                 "copy it again", "changed on disk"):
        assert message.lower().count(once.lower()) == 1, (once, message)
    assert shard in message
    assert message.endswith("Check the file with `feedline verify`, or pass on_error='substitute'.")
