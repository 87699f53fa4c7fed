"""The remote-file seam's options: the cache's place and limit from arguments, else from the
environment, read in one function at the edge."""
from __future__ import annotations

import os

import pytest

from feedline.core.errors import StoreError
from feedline.stores.remote import RemoteOptions, from_environment, parse_bytes
from feedline.dataset.urls import split_url


def test_sizes_read_as_people_write_them():
    assert parse_bytes("50GB", "x") == 50 * 10**9 and parse_bytes("512MiB", "x") == 512 * 2**20
    assert parse_bytes("1000", "x") == 1000 and parse_bytes("1.5 kib", "x") == 1536
    for bad in ("lots", "-1GB", "0", "5 PB"):
        with pytest.raises(StoreError, match="FEEDLINE_CACHE_LIMIT="):
            parse_bytes(bad, "FEEDLINE_CACHE_LIMIT")


def test_the_cache_is_chosen_by_the_environment_where_the_options_leave_it(tmp_path):
    home = os.path.join(os.path.expanduser("~"), ".cache", "feedline")
    assert from_environment(environ={}) == RemoteOptions(cache_dir=home, cache_limit=50 * 2**30)
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert from_environment(environ=xdg).cache_root == str(tmp_path / "xdg" / "feedline")
    chosen = {**xdg, "FEEDLINE_CACHE_DIR": str(tmp_path / "c"), "FEEDLINE_CACHE_LIMIT": "2GiB"}
    options = from_environment(RemoteOptions(tries=2), environ=chosen)
    assert options == RemoteOptions(cache_dir=str(tmp_path / "c"), cache_limit=2 * 2**30, tries=2)
    given = RemoteOptions(cache_dir="rel", cache_limit=7)   # what the options say wins
    assert from_environment(given, environ=chosen) == given and given.cache_root == os.path.abspath("rel")
    with pytest.raises(StoreError, match="FEEDLINE_CACHE_LIMIT='lots': give a size"):
        from_environment(environ={"FEEDLINE_CACHE_LIMIT": "lots"})
    with pytest.raises(ValueError, match="cache_dir is not chosen: pass the options through from_environment"):
        RemoteOptions().cache_root   # noqa: B018 - below the edge nothing reads the environment
    with pytest.raises(ValueError, match="cache_limit > 0"):
        RemoteOptions(cache_limit=0)


def test_a_url_names_a_bucket_and_an_object():
    assert split_url("s3://bucket/a/b.shards.json") == ("s3", "bucket", "a/b.shards.json")
    for bad in ("s3://bucket", "s3://bucket/", "s3:///key", "s3://bucket/dir/"):
        with pytest.raises(StoreError, match="name a bucket and an object"):
            split_url(bad)
