"""converters/writers.py: the writer of the format asked for, and the unfinished pack of the
other format at the same OUT (--format changed since an interrupted pack, OUT's name kept):
nothing of it can be continued, so --resume refuses naming the change and leaves it as it is,
and a pack without --resume removes it (an HDF5 pack's staging files were left behind for
good, an LMDB partial silently replaced under --resume)."""
from __future__ import annotations

import os

import pytest
from pack_helpers import interrupt_at, mixed, records_of  # noqa: F401  (mixed: a module fixture)

from converters import pack
from feedline.core.errors import PackError


@pytest.mark.parametrize("first, then", [("lmdb", "hdf5"), ("hdf5", "lmdb")])
def test_an_unfinished_pack_of_the_other_format(mixed, tmp_path, monkeypatch, first, then):  # noqa: F811
    whole = records_of(pack(mixed, str(tmp_path / f"whole.{then}"), format=then).out)
    out = str(tmp_path / "o.data")
    with monkeypatch.context() as m:
        interrupt_at(m, mixed, 11)
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, format=first, commit_every=3, jobs=1)
    left = sorted(os.listdir(tmp_path))
    with pytest.raises(PackError) as err:
        pack(mixed, out, format=then, commit_every=3, resume=True)
    assert str(err.value) == (f"{out}.partial: the interrupted pack used other options (format: '{first}' then, "
                              f"'{then}' now); rerun with the same options, or start over with --overwrite and no "
                              "--resume")
    assert sorted(os.listdir(tmp_path)) == left
    report = pack(mixed, out, format=then, commit_every=3)
    assert report.resumed_from == 0 and records_of(out) == whole
    assert sorted(os.listdir(tmp_path)) == sorted(["o.data", "o.data.errors.csv", f"whole.{then}",
                                                   f"whole.{then}.errors.csv"])
