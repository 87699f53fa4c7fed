"""What goes wrong with a bucket, against the real server: each a bounded wait and one line
saying what to do, never a hang; damaged bytes fetched again once, then a clear error."""
from __future__ import annotations

import os
import time

import pytest

from converters import pack
from feedline.core.errors import StoreError
from feedline.stores import RemoteOptions, open_dataset
from feedline.stores.remote import RemoteError
from tests.remote_helpers import make_bucket, records

pytestmark = pytest.mark.s3

FAST = RemoteOptions(tries=2, backoff_s=0.1, timeout_s=1.5, fetch_ahead=0)


@pytest.fixture(scope="module")
def faults_pack(s3_server, photo_folder, tmp_path_factory):
    """photo_folder in 2 shards, in its own bucket (the tests here damage it)."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in s3_server.env().items():
            mp.setenv(name, value)
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("faults-upload")))
        prefix = make_bucket(s3_server, "faults")
        pack(str(photo_folder), f"{prefix}/set.lmdb", num_shards=2, progress=False)
    return f"{prefix}/set.shards.json"


def client(server):
    import boto3   # the test extra's; imported here, so the file collects without it
    env = server.env()
    return boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")


def one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_server_that_stops_answering_mid_epoch_is_an_error_naming_the_shard(faults_pack, s3_env):
    with open_dataset(faults_pack, remote=FAST) as store:
        store.read(0)                          # shard 0 cached; shard 1 not yet
        s3_env.pause()
        try:
            started = time.monotonic()
            with pytest.raises(RemoteError) as exc:
                store.read(len(store) - 1)
            waited = time.monotonic() - started
        finally:
            s3_env.resume()
    text = one_line(exc)
    assert "s3://faults/set-00001-of-00002.lmdb" in text and "failed 2 times" in text
    assert waited < 15


def test_wrong_credentials_missing_bucket_and_missing_object_each_say_what_to_do(faults_pack, s3_env,
                                                                                 monkeypatch):
    with pytest.raises(RemoteError, match="no bucket 'nobucket'.*create the bucket") as exc:
        open_dataset("s3://nobucket/set.shards.json", remote=FAST)
    one_line(exc)
    with pytest.raises(RemoteError, match="faults/none.shards.json: no such object; check the URL") as exc:
        open_dataset("s3://faults/none.shards.json", remote=FAST)
    one_line(exc)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(RemoteError, match="access denied; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY") as exc:
        open_dataset(faults_pack, remote=FAST)
    one_line(exc)


def test_a_shard_damaged_in_the_cache_is_fetched_again(faults_pack, s3_env, tmp_path):
    options = RemoteOptions(cache_dir=str(tmp_path / "c"), fetch_ahead=0)
    with open_dataset(faults_pack, remote=options) as store:
        good = records(store)
        path = store.cache.path(os.path.basename(store.shard_files[0]))
    with open(path, "r+b") as fh:           # flip bytes inside record 0's JPEG
        with open_dataset(path) as shard:
            offset = shard.byte_ranges(0, 1)[0][1] + 200
        fh.seek(offset)
        fh.write(b"\x00\x01\x02\x03")
    with open_dataset(faults_pack, remote=options) as store:
        assert bytes(store.read_checked(0)) == good[0][0]
        assert store.cache.fetched == [os.path.basename(path)]


def test_a_shard_changed_in_the_bucket_fails_twice_then_says_so(faults_pack, s3_env, s3_server, tmp_path):
    s3 = client(s3_server)
    original = s3.get_object(Bucket="faults", Key="set-00001-of-00002.lmdb")["Body"].read()
    damaged = bytearray(original)
    damaged[len(damaged) // 2: len(damaged) // 2 + 64] = bytes(64)
    s3.put_object(Bucket="faults", Key="set-00001-of-00002.lmdb", Body=bytes(damaged))
    try:
        with open_dataset(faults_pack, remote=RemoteOptions(cache_dir=str(tmp_path / "c"), fetch_ahead=0)) as store:
            with pytest.raises(StoreError, match="again after fetching it a second time.*upload it again") as exc:
                store.read(len(store) - 1)
            one_line(exc)
            assert not store.cache.complete("set-00001-of-00002.lmdb")
    finally:
        s3.put_object(Bucket="faults", Key="set-00001-of-00002.lmdb", Body=original)


def test_an_unreachable_server_stops_a_loader_even_when_bad_records_are_substituted(faults_pack, s3_env, tmp_path):
    from feedline import FeedLoader
    store = open_dataset(faults_pack, remote=RemoteOptions(tries=2, backoff_s=0.1, timeout_s=1.5,
                                                            cache_dir=str(tmp_path / "c")))
    s3_env.pause()
    try:
        with FeedLoader(store, batch_size=4, train=True, size=32, num_workers=1, device="cpu",
                        on_error="substitute") as loader:
            with pytest.raises(RemoteError, match="s3://faults/set-0000[01]-of-00002.lmdb: fetch failed 2 times"):
                next(iter(loader))
    finally:
        s3_env.resume()


@pytest.mark.parametrize("offset", [16, 136], ids=["magic", "root-page"])
def test_a_cached_shard_whose_header_is_damaged_is_fetched_again_once(faults_pack, s3_env, tmp_path, offset):
    """Damage outside the records (the LMDB magic, the main database's root page number) makes
    the cached file unopenable: it is fetched again once, not every record substituted."""
    options = RemoteOptions(cache_dir=str(tmp_path / "c"), fetch_ahead=0)
    with open_dataset(faults_pack, remote=options) as store:
        good = records(store)
        name = os.path.basename(store.shard_files[0])
        path = store.cache.path(name)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ 0xFF]))
    with open_dataset(faults_pack, remote=options) as store:
        assert [bytes(store.read_checked(i)) for i in range(len(store))] == [r[0] for r in good]
        assert store.cache.fetched == [name]


def member_data_offset(path: str, member: str) -> int:
    """Where the bytes of ``member`` of the zip file ``path`` begin (after its local header)."""
    import struct
    import zipfile
    with zipfile.ZipFile(path) as zf:
        start = zf.getinfo(member).header_offset
    with open(path, "rb") as fh:
        fh.seek(start + 26)
        name_length, extra_length = struct.unpack("<HH", fh.read(4))
    return start + 30 + name_length + extra_length


def test_a_cached_head_that_is_damaged_is_fetched_again(faults_pack, s3_env, tmp_path):
    options = RemoteOptions(cache_dir=str(tmp_path / "c"), fetch_ahead=0)
    with open_dataset(faults_pack, remote=options) as store:
        good = records(store)
        head = store.cache.path(os.path.basename(store.shard_files[1]) + ".head")
    with open(head, "rb") as fh:
        original = fh.read()
    with open(head, "r+b") as fh:   # a label's byte: the member's CRC no longer matches
        fh.seek(member_data_offset(head, "column.labels.npy") + 130)
        byte = fh.read(1)[0]
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte ^ 0x01]))
    with open_dataset(faults_pack, remote=options) as store:
        assert records(store) == good
        assert store.cache.fetched == []   # the head only: no shard
    with open(head, "rb") as fh:
        assert fh.read() == original   # fetched again, in place of the damaged copy


@pytest.mark.parametrize("num_workers", [0, 2], ids=["threads", "workers"])
def test_a_hung_server_is_one_error_within_two_request_budgets_and_the_loader_closes_soon_after(
        faults_pack, s3_env, tmp_path, num_workers):
    """SIGSTOP: connections are accepted and never answered. The fetch-ahead thread, the readers
    and every worker waiting for the same shard meet one failure, not one each in turn; the
    error is the bucket's (never a bad record to substitute); closing does not wait out the
    requests still in flight."""
    from feedline import FeedLoader
    from feedline.core.errors import UnavailableError
    options = RemoteOptions(tries=2, backoff_s=0.1, timeout_s=2.0, cache_dir=str(tmp_path / "c"))
    budget = options.tries * options.timeout_s
    store = open_dataset(faults_pack, remote=options)
    s3_env.pause()
    try:
        started = time.monotonic()
        loader = FeedLoader(store, batch_size=4, train=True, size=32, num_workers=num_workers, device="cpu",
                            on_error="substitute")
        with pytest.raises(UnavailableError, match=r"s3://faults/set-0000[01]-of-00002.lmdb: fetch failed 2 times"):
            next(iter(loader))
        failed = time.monotonic() - started
        loader.close()
        store.close()
        closed = time.monotonic() - started - failed
    finally:
        s3_env.resume()
    assert loader.stats.ledger.substituted == 0
    assert failed < 2 * budget and closed < 10.0, (failed, closed)
