"""BadRecordPolicy's error for a bad record, as the consumer reads it: one sentence per part, whoever wrote the
detail."""
from __future__ import annotations

import pytest
from storefiles import make_records, write_lmdb

from feedline import FeedLoader
from feedline.core.errors import DecodeError


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_the_error_of_a_bad_record_reads_as_one_sentence_each(tmp_path, damage):
    """The consumer's error is 'record I (PATH) of FILE: REASON: DETAIL. Check ...': the
    detail ends with one full stop, whether the store's message brings its own (a missing
    record) or the decoder's does not."""
    records = make_records(6, 2)
    if damage == "garbage":
        records.images[3] = b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10
    path = write_lmdb(tmp_path / "bad.lmdb", records, skip=(3,) if damage == "missing" else ())
    loader = FeedLoader(path, batch_size=2, size=16, shuffle=False, num_workers=1, device="cpu", decoder="opencv")
    with pytest.raises(DecodeError) as info:
        list(loader)
    [row] = loader.stats.bad_records
    reason = {"missing": "unreadable", "garbage": "cannot decode"}[damage]
    assert (row.index, row.reason) == (3, reason)
    detail = row.detail if row.detail.endswith(".") else row.detail + "."
    assert str(info.value) == (f"record 3 (class_1/img_003.jpg) of {path}: {reason}: {detail} "
                               "Check the file with `feedline verify`, or pass on_error='substitute'.")
    assert ".." not in str(info.value)
    loader.close()
