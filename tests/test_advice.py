"""stores/advice.py: the byte ranges a read-ahead advises, merged where records are near."""
from __future__ import annotations

import numpy as np
from layout_helpers import plan, records, stores  # noqa: F401 (fixtures)

from feedline.stores.advice import merged_ranges


def test_merged_ranges_join_near_neighbours_only():
    offsets = np.array([5000, 0, 1000, 900_000, 1000])
    lengths = np.array([100, 1000, 500, 10, 200])   # 1000..1500 and 1000..1200 overlap
    assert merged_ranges("f", offsets, lengths) == [("f", 0, 5100), ("f", 900_000, 10)]
    assert merged_ranges("f", offsets, lengths, gap=0) == [("f", 0, 1500), ("f", 5000, 100), ("f", 900_000, 10)]
    assert merged_ranges("f", np.zeros(0, np.int64), np.zeros(0, np.int64)) == []
