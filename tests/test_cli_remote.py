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


@pytest.mark.s3
@pytest.mark.slow
def test_train_reads_a_bucket_in_shard_order(uploaded, s3_env, tmp_path, capsys, restore_logging):
    from test_train_helpers import FAST, summary
    url, _ = uploaded
    out = tmp_path / "run"
    assert main(["train", url, "--val", url, *FAST, "--epochs", "1", "--synthetic-steps", "0",
                 "--device", "cpu", "--out", str(out)]) == 0
    final = summary(out)["final"]
    assert final["val_images"] == 48


def test_feedloader_refuses_an_unsupported_scheme_in_one_line():
    from feedline import FeedLoader
    from feedline.core.errors import StoreError
    with pytest.raises(StoreError, match=r"gs://b/x.shards.json: feedline does not read gs:// URLs.*s3://"):
        FeedLoader("gs://b/x.shards.json", batch_size=4, train=False)
