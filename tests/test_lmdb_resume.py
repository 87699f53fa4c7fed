"""Resuming an LMDB pack: what a resume finds in OUT.partial (a damaged journal entry, images the
journal does not list, a finished but unrenamed pack, a file that is not LMDB)."""
from __future__ import annotations

import lmdb
import pytest
from pack_helpers import interrupted, mixed, records_of

from converters import pack
from feedline.core.errors import PackError
from feedline.dataset.format import image_key


def put(partial: str, key: bytes, value: bytes) -> None:
    import lmdb
    env = lmdb.open(partial, subdir=False, lock=False)
    try:
        with env.begin(write=True) as txn:
            txn.put(key, value)
    finally:
        env.close()


def test_lmdb_resume_refuses_a_damaged_journal_entry_naming_the_file(mixed, tmp_path, monkeypatch):
    from feedline.dataset.format import journal_key
    out = str(tmp_path / "o.lmdb")
    interrupted(mixed, out, monkeypatch)
    put(out + ".partial", journal_key(1), b"{not json")
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value).startswith(f"{out}.partial: the resume journal is damaged (")
    assert str(err.value).endswith("); start over without --resume")


def test_lmdb_resume_refuses_images_the_journal_does_not_list(mixed, tmp_path, monkeypatch):
    from feedline.dataset.format import image_key
    out = str(tmp_path / "o.lmdb")
    interrupted(mixed, out, monkeypatch)   # 9 files committed: 8 records, 1 skipped
    put(out + ".partial", image_key(8), b"\xff\xd8 a record added after the last commit")
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value) == (f"{out}.partial: 9 images but the journal lists 8; "
                              "start over without --resume")


def test_lmdb_a_finished_unrenamed_pack_is_packed_again_and_says_so(mixed, tmp_path, monkeypatch, caplog):
    import converters.packer as packer
    out = str(tmp_path / "o.lmdb")

    def no_rename(a, b):
        raise KeyboardInterrupt
    with monkeypatch.context() as m:
        m.setattr(packer.os, "replace", no_rename)
        with pytest.raises(KeyboardInterrupt):
            pack(mixed, out, commit_every=3)
    caplog.clear()
    report = pack(mixed, out, commit_every=3, resume=True)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("converters")]
    assert said == [f"{out}.partial: a finished but unrenamed pack; packing again"]
    assert report.resumed_from == 0 and report.packed == 13
    assert records_of(out) == records_of(pack(mixed, str(tmp_path / "whole.lmdb")).out)


def test_lmdb_resume_refuses_a_partial_that_is_not_lmdb(mixed, tmp_path):
    out = str(tmp_path / "o.lmdb")
    with open(out + ".partial", "wb") as fh:
        fh.write(b"not an LMDB file" * 1000)
    with pytest.raises(PackError) as err:
        pack(mixed, out, resume=True)
    assert str(err.value).startswith(f"{out}.partial: cannot open as LMDB (")
    assert str(err.value).endswith("); start over without --resume")
