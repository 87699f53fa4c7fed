"""A shard's head: its metadata, columns and record lengths without its images, read back whole."""
from __future__ import annotations

import numpy as np
import pytest

from feedline.core.errors import StoreError
from feedline.stores import open_dataset
from feedline.stores.shard_head import head_bytes, parse_head


def test_a_head_holds_what_opening_the_shard_gives(packed_lmdb):
    with open_dataset(str(packed_lmdb)) as store:
        raw = head_bytes(store)
        meta, columns, targets, lengths = parse_head(raw, "x.head")
        assert meta == store.meta and len(raw) < store.byte_lengths().sum() / 10
        np.testing.assert_array_equal(columns.labels, store.labels)
        np.testing.assert_array_equal(columns.checksums, store.checksums)
        np.testing.assert_array_equal(lengths, store.byte_lengths())
        assert [columns.path(i) for i in range(len(store))] == [store.path(i) for i in range(len(store))]
        assert targets.column_names() == store.target_columns.column_names()


def test_a_damaged_head_is_one_line(packed_lmdb):
    with open_dataset(str(packed_lmdb)) as store:
        raw = head_bytes(store)
    with pytest.raises(StoreError, match="x.head: the shard's head is damaged.*upload the data set again") as exc:
        parse_head(raw[: len(raw) // 2], "x.head")
    assert "\n" not in str(exc.value)
