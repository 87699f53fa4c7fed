"""converters/complete.py: `pack --resume` when OUT is already there. The same pack is reported
as done with what it holds; every other OUT is refused in full, naming what differs, and left
as it is: other options, other input, and a file that is no complete pack at all."""
from __future__ import annotations

import os
import shutil

import pytest
from pack_helpers import mixed  # noqa: F401  (a module fixture)

from converters import pack
from feedline.core.errors import PackError


@pytest.mark.parametrize("ext", ["lmdb", "h5"])
def test_the_same_pack_is_reported_as_it_is(mixed, tmp_path, ext):  # noqa: F811
    out = str(tmp_path / f"o.{ext}")
    first = pack(mixed, out)
    again = pack(mixed, out, resume=True)
    assert again.already_complete and (again.out, again.format, again.packed) == (out, first.format, 13)
    assert (again.found, again.resumed_from, again.converted) == (15, 15, 0)
    assert sorted(s.path for s in again.skipped) == sorted(s.path for s in first.skipped)
    assert again.error_report == out + ".errors.csv" and 0 <= again.seconds < 600


def test_every_other_out_is_refused_in_full_and_kept(mixed, tmp_path):  # noqa: F811
    out = str(tmp_path / "o.lmdb")
    pack(mixed, out)
    before = open(out, "rb").read()
    with pytest.raises(PackError) as err:
        pack(mixed, out, quality=80, max_side=64, resume=True)
    assert str(err.value) == (f"{out} is complete but was packed with other options (max_side: None then, 64 now, "
                              "quality: 95 then, 80 now); rerun with the same options, or pass --overwrite to "
                              "replace it")
    other = shutil.copytree(mixed, str(tmp_path / "other"))
    os.remove(os.path.join(other, "class_001", "cmyk.jpg"))
    with pytest.raises(PackError) as err:
        pack(other, out, resume=True)
    assert str(err.value) == (f"{out} is complete but was packed from other input (the files or labels of {other} "
                              "differ); pass --overwrite to replace it")
    assert open(out, "rb").read() == before
    junk = str(tmp_path / "junk.lmdb")
    with open(junk, "wb") as fh:
        fh.write(b"not a pack")
    with pytest.raises(PackError) as err:
        pack(mixed, junk, resume=True)
    assert str(err.value).startswith(f"{junk} already exists and is not a complete pack ({junk}: ")
    assert str(err.value).endswith("); pass --overwrite to replace it")
    assert open(junk, "rb").read() == b"not a pack"
