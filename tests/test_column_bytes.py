"""feedline.dataset.format.column_bytes: the columns' stored bytes built without numpy (what the
writers store) are exactly those of the numpy Columns, and read back as they were given."""
from __future__ import annotations

from feedline.dataset.format import CHECKSUMS, COLUMN_NAMES, Columns, column_bytes


def test_column_bytes_are_the_numpy_columns_bytes():
    labels = [0, 7, 2**40, 999]
    sizes = [[375, 500], [1, 1], [65535, 2**31 - 1], [480, 640]]
    paths = ["a/1.jpg", "b/ünïcode 2.JPG", "c/" + "x" * 300 + ".jpeg", "d/4.png"]
    sums = [0, 2**64 - 1, 12345678901234567890, 42]
    built = column_bytes(labels, sizes, paths, sums)
    assert list(built) == [*COLUMN_NAMES, CHECKSUMS]   # storage order
    assert built == Columns.from_lists(labels, sizes, paths, sums).to_bytes()
    back = Columns.from_buffers(built, len(labels), "test")
    assert back.labels.tolist() == labels and back.sizes.tolist() == sizes
    assert [back.path(i) for i in range(len(paths))] == paths and back.checksums.tolist() == sums


def test_column_bytes_of_nothing():
    assert column_bytes([], [], [], []) == Columns.from_lists([], [], [], []).to_bytes()
