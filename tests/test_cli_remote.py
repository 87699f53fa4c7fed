"""The commands where a URL enters: pack, info, verify, train; unsupported schemes in one line."""
from __future__ import annotations

import json

import pytest

from feedline.cli import main


@pytest.mark.parametrize("argv", [
    ["info", "gs://bucket/train.shards.json"],
    ["verify", "https://host/train.shards.json"],
    ["pack", "SRC", "az://container/train.lmdb", "--num-shards", "2"],
    ["train", "gs://bucket/train.shards.json", "--epochs", "1"],
])
def test_unsupported_schemes_are_one_line_naming_what_is_read(argv, capsys, restore_logging):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "does not read" in err and "s3://" in err, err


@pytest.mark.s3
def test_info_and_verify_read_a_bucket(uploaded, s3_env, capsys, restore_logging):
    url, _ = uploaded
    assert main(["info", url, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["count"] == 48 and len(info["classes"]) == 4
    assert main(["verify", url, "--checksums-only"]) == 0
    assert "48" in capsys.readouterr().out
