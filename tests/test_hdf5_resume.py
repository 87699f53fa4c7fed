"""Resuming an HDF5 pack: what a resume finds in the staging journal and images, and every
journal it must refuse (not one, damaged, of another version or shape, with a gap, or staged
bytes lost), each named with what to do."""
from __future__ import annotations

import json
import os

import pytest
from pack_helpers import interrupted, mixed

from converters import pack
from feedline.core.errors import PackError


def test_hdf5_resume_refuses_a_journal_that_is_not_one(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    journal = out + ".partial.journal"
    lines = open(journal, "rb").read().splitlines(keepends=True)
    with open(journal, "wb") as fh:
        fh.write(b"[1, 2]\n" + b"".join(lines[1:]))
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value) == f"{journal}: not a feedline staging journal; start over without --resume"


def test_hdf5_resume_refuses_a_damaged_journal_line_naming_the_journal(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    journal = out + ".partial.journal"
    with open(journal, "ab") as fh:
        fh.write(b'{"chunk": 3, "consumed": \n')   # a whole line, not a torn one
    with pytest.raises(PackError, match=r"the resume journal is damaged .*; start over without --resume") as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value).startswith(f"{journal}: the resume journal is damaged (")


def test_hdf5_resume_refuses_staged_bytes_that_were_lost(mixed, tmp_path, monkeypatch):
    import json
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    journal, staging = out + ".partial.journal", out + ".partial.images"
    header, *entries = [json.loads(line) for line in open(journal, "rb").read().splitlines()]
    needed = sum(sum(e["lengths"]) for e in entries)
    assert os.path.getsize(staging) == header["staged_at"] + needed   # exactly what was committed
    os.truncate(staging, header["staged_at"] + needed - 10)
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value) == (f"{staging}: {needed - 10} staged bytes but the journal needs {needed}; "
                              "start over without --resume")


def rewrite_journal_line(out: str, k: int, change) -> None:
    """Replace the k-th commit's line of an HDF5 staging journal by ``change(entry dict)`` (bytes)."""
    import json
    journal = out + ".partial.journal"
    lines = open(journal, "rb").read().splitlines(keepends=True)
    lines[k] = change(json.loads(lines[k])) + b"\n"
    with open(journal, "wb") as fh:
        fh.write(b"".join(lines))


@pytest.mark.parametrize("change, says", [
    (lambda e: json_bytes({**e, "version": 1}),
     "journal version 1, but this feedline resumes only version 2; start over without --resume"),
    (lambda e: json_bytes({**e, "bogus": 1}), "the resume journal is damaged ("),   # a TypeError
    (lambda e: b"[1, 2]", "the resume journal is damaged ("),                        # a TypeError too
    (lambda e: b"\xff\xfe{", "the resume journal is damaged ("),                    # a UnicodeDecodeError
])
def test_hdf5_resume_refuses_a_journal_entry_of_another_version_or_shape(mixed, tmp_path, monkeypatch, change, says):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    rewrite_journal_line(out, 2, change)
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value).startswith(f"{out}.partial.journal: {says}"), str(err.value)
    assert str(err.value).endswith("; start over without --resume")


def test_hdf5_resume_refuses_a_journal_with_a_gap(mixed, tmp_path, monkeypatch):
    out = str(tmp_path / "o.h5")
    interrupted(mixed, out, monkeypatch)
    rewrite_journal_line(out, 2, lambda e: json_bytes({**e, "chunk": 5}))
    with pytest.raises(PackError) as err:
        pack(mixed, out, commit_every=3, resume=True)
    assert str(err.value) == f"{out}.partial: the resume journal has a gap at chunk 1; start over without --resume"
    rewrite_journal_line(out, 2, lambda e: json_bytes({**e, "chunk": 1, "first_record": e["first_record"] + 1}))
    with pytest.raises(PackError, match="has a gap at chunk 1"):
        pack(mixed, out, commit_every=3, resume=True)


def json_bytes(value) -> bytes:
    import json
    return json.dumps(value).encode()
