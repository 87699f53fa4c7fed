"""The remote-file seam's options: the cache's place and limit from arguments or the environment."""
from __future__ import annotations

import pytest

from feedline.errors import StoreError
from feedline.stores.remote import RemoteOptions, parse_bytes
from feedline.urls import split_url


def test_sizes_read_as_people_write_them():
    assert parse_bytes("50GB", "x") == 50 * 10**9 and parse_bytes("512MiB", "x") == 512 * 2**20
    assert parse_bytes("1000", "x") == 1000 and parse_bytes("1.5 kib", "x") == 1536
    for bad in ("lots", "-1GB", "0", "5 PB"):
        with pytest.raises(StoreError, match="FEEDLINE_CACHE_LIMIT="):
            parse_bytes(bad, "FEEDLINE_CACHE_LIMIT")


def test_the_cache_defaults_to_the_users_cache_and_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("FEEDLINE_CACHE_DIR", raising=False)
    monkeypatch.delenv("FEEDLINE_CACHE_LIMIT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert RemoteOptions.from_env() == RemoteOptions()
    assert RemoteOptions().cache_root == str(tmp_path / "xdg" / "feedline")
    monkeypatch.setenv("FEEDLINE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("FEEDLINE_CACHE_LIMIT", "2GiB")
    options = RemoteOptions.from_env()
    assert options.cache_root == str(tmp_path / "c") and options.cache_limit == 2 * 2**30
    assert RemoteOptions(cache_dir="rel").cache_root.endswith("/rel")
    with pytest.raises(ValueError, match="cache_limit > 0"):
        RemoteOptions(cache_limit=0)


def test_a_url_names_a_bucket_and_an_object():
    assert split_url("s3://bucket/a/b.shards.json") == ("s3", "bucket", "a/b.shards.json")
    for bad in ("s3://bucket", "s3://bucket/", "s3:///key", "s3://bucket/dir/"):
        with pytest.raises(StoreError, match="name a bucket and an object"):
            split_url(bad)
