"""`pack SRC s3://...`: shards uploaded as they complete, the index last, a killed upload resumed
to the same objects; URLs of other schemes refused."""
from __future__ import annotations

import os

import pytest

import converters.upload as upload
from converters import pack
from feedline.core.errors import FeedlineError, PackError
from feedline.stores import open_dataset
from tests.remote_helpers import make_bucket, records

pytestmark = pytest.mark.s3


def objects(server, bucket: str) -> dict[str, str]:
    import boto3   # the test extra's; imported here, so the file collects without it
    env = server.env()
    s3 = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    listing = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: o["LastModified"].isoformat() for o in listing}


def test_a_killed_upload_resumes_to_the_same_objects(photo_folder, s3_env, monkeypatch, tmp_path):
    prefix = make_bucket(s3_env, "resume")
    real, calls = upload.pack_scan, []

    def killed_at_third(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)
    with monkeypatch.context() as m:
        m.setattr(upload, "pack_scan", killed_at_third)
        with pytest.raises(KeyboardInterrupt):
            pack(str(photo_folder), f"{prefix}/a/train.lmdb", num_shards=4, progress=False)
    before = objects(s3_env, "resume")
    assert sorted(before) == ["a/train-00000-of-00004.lmdb", "a/train-00000-of-00004.lmdb.head",
                              "a/train-00001-of-00004.lmdb", "a/train-00001-of-00004.lmdb.head"]  # no index yet
    report = pack(str(photo_folder), f"{prefix}/a/train.lmdb", num_shards=4, progress=False, resume=True)
    after = objects(s3_env, "resume")
    assert {k: after[k] for k in before} == before      # the two uploaded shards were kept as they were
    assert report.resumed_from == 24 and report.packed == 48
    pack(str(photo_folder), f"{prefix}/b/train.lmdb", num_shards=4, progress=False)   # uninterrupted
    local = tmp_path / "local.lmdb"
    pack(str(photo_folder), str(local), num_shards=4, progress=False)
    with open_dataset(f"{prefix}/a/train.shards.json") as a, open_dataset(f"{prefix}/b/train.shards.json") as b, \
            open_dataset(str(tmp_path / "local.shards.json")) as c:
        assert records(a) == records(b) == records(c)
        assert a.meta["shards"] == b.meta["shards"]


def test_an_existing_data_set_is_not_replaced_without_overwrite_or_resume(photo_folder, s3_env):
    prefix = make_bucket(s3_env, "exists")
    pack(str(photo_folder), f"{prefix}/t.lmdb", num_shards=2, progress=False)
    before = objects(s3_env, "exists")
    with pytest.raises(PackError, match="t.shards.json already exists; pass --overwrite.*or --resume"):
        pack(str(photo_folder), f"{prefix}/t.lmdb", num_shards=2, progress=False)
    assert objects(s3_env, "exists") == before


def test_a_bucket_needs_shards_and_other_schemes_are_refused(photo_folder, tmp_path):
    with pytest.raises(PackError, match="add --num-shards"):
        pack(str(photo_folder), "s3://some-bucket/train.lmdb", progress=False)
    for out in ("gs://b/train.lmdb", "https://host/train.lmdb"):
        with pytest.raises(FeedlineError, match="does not read .*://.*s3://"):
            pack(str(photo_folder), out, num_shards=2, progress=False)
    with pytest.raises(FeedlineError, match="local image folder"):
        pack("s3://b/images", str(tmp_path / "x.lmdb"))


def killed_after_two_shards(monkeypatch, src, url: str, **kw) -> None:
    real, calls = upload.pack_scan, []

    def killed_at_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(upload, "pack_scan", killed_at_third)
        with pytest.raises(KeyboardInterrupt):
            pack(src, url, num_shards=4, progress=False, **kw)


def contents(server, bucket: str) -> dict[str, bytes]:
    import boto3
    env = server.env()
    s3 = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def test_a_killed_upload_resumed_with_other_options_is_refused_naming_them(photo_folder, s3_env, monkeypatch):
    """The shards already uploaded are of the first run's options: a resume with others would
    have packed and uploaded every shard again over them."""
    prefix = make_bucket(s3_env, "options")
    killed_after_two_shards(monkeypatch, str(photo_folder), f"{prefix}/t.lmdb")
    before = objects(s3_env, "options")
    with pytest.raises(PackError) as err:
        pack(str(photo_folder), f"{prefix}/t.lmdb", num_shards=4, quality=80, max_side=64, progress=False,
             resume=True)
    assert str(err.value) == (f"{prefix}/t-00000-of-00004.lmdb: the interrupted pack used other options "
                              "(max_side: None then, 64 now, quality: 95 then, 80 now); rerun with the same options, "
                              "or start over with --overwrite and no --resume")
    assert objects(s3_env, "options") == before
    report = pack(str(photo_folder), f"{prefix}/t.lmdb", num_shards=4, progress=False, resume=True, jobs=1,
                  commit_every=5)   # neither shapes the output: the same pack goes on
    assert report.resumed_from == 24 and report.packed == 48


def test_a_complete_data_set_is_kept_by_a_resume_and_replaced_only_with_overwrite(photo_folder, s3_env):
    prefix = make_bucket(s3_env, "complete")
    src, url = str(photo_folder), f"{prefix}/t.lmdb"
    pack(src, url, num_shards=2, progress=False)
    before = contents(s3_env, "complete")
    for change, why in [(dict(num_shards=2, quality=80), "used other options (quality: 95 then, 80 now)"),
                        (dict(num_shards=3), "cut the files into 2 shards, this run into 3")]:
        with pytest.raises(PackError) as err:
            pack(src, url, progress=False, resume=True, **change)
        assert str(err.value) == (f"{prefix}/t.shards.json: a complete data set whose pack {why}; pass --overwrite "
                                  "to replace it")
    again = pack(src, url, num_shards=2, progress=False, resume=True)
    assert again.resumed_from == again.packed == 48 and contents(s3_env, "complete") == before
    pack(src, url, num_shards=2, quality=80, progress=False, overwrite=True)
    with open_dataset(f"{prefix}/t.shards.json") as store:
        assert store.meta["pack_options"]["quality"] == 80 and len(store) == 48


def test_a_shard_packed_but_not_uploaded_when_killed_is_packed_again(photo_folder, s3_env, monkeypatch, caplog):
    """Killed while uploading shard 1, its local copy complete in the staging folder: the
    resume keeps shard 0 (said so in the log and the report) and packs shard 1 again over
    the local copy."""
    from feedline.stores.remote import Bucket
    prefix = make_bucket(s3_env, "between")
    url = f"{prefix}/t.lmdb"
    real, calls = Bucket.upload, []

    def killed_at_second(self, path, key):
        calls.append(key)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, path, key)
    with monkeypatch.context() as m:
        m.setattr(Bucket, "upload", killed_at_second)
        with pytest.raises(KeyboardInterrupt):
            pack(str(photo_folder), url, num_shards=2, progress=False)
    caplog.set_level("INFO", logger="converters.upload")
    report = pack(str(photo_folder), url, num_shards=2, progress=False, resume=True)
    assert [r.out for r in report.shards] == [f"{prefix}/t-00000-of-00002.lmdb", f"{prefix}/t-00001-of-00002.lmdb"]
    assert [r.resumed_from for r in report.shards] == [24, 0] and report.packed == 48
    assert f"{prefix}/t-00000-of-00002.lmdb: already uploaded (resume)" in caplog.messages
    assert f"{prefix}/t.shards.json: 2 shards, 48 records" in caplog.messages
    with open_dataset(f"{prefix}/t.shards.json") as store:
        pack_id = store.stores[0].meta["shard"]["pack_id"]
        assert store.meta["source"] == str(photo_folder) and len(pack_id) == 32
        assert [s.meta["shard"] for s in store.stores] == [{"index": k, "of": 2, "pack_id": pack_id} for k in (0, 1)]


def test_a_killed_upload_resumed_from_other_files_is_refused(photo_folder, s3_env, monkeypatch, tmp_path):
    import shutil
    prefix = make_bucket(s3_env, "files")
    src = shutil.copytree(photo_folder, tmp_path / "src")
    killed_after_two_shards(monkeypatch, str(src), f"{prefix}/t.lmdb")
    os.remove(sorted(src.rglob("*.jpg"))[-1])   # from the last shard: the split moves by one file
    with pytest.raises(PackError) as err:
        pack(str(src), f"{prefix}/t.lmdb", num_shards=4, progress=False, resume=True)
    assert str(err.value) == (f"{prefix}/t-00000-of-00004.lmdb: the interrupted pack was made from other files or "
                              f"labels than {src} holds now, or cut elsewhere (--shard-size); rerun with the same "
                              "options, or start over with --overwrite and no --resume")


def test_bucket_refusals_in_full_and_format_from_the_option(photo_folder, s3_env, tmp_path):
    prefix = make_bucket(s3_env, "refusals")
    src = str(photo_folder)
    with pytest.raises(PackError) as err:
        pack(src, f"{prefix}/t.lmdb", num_shards=2, shard_index=0, progress=False)
    assert str(err.value) == (f"{prefix}/t.lmdb: --shard-index packs one part on one machine; to a bucket, pack all "
                              "shards in one run (it uploads each as it completes)")
    pack(src, f"{prefix}/t.lmdb", num_shards=2, progress=False)
    with pytest.raises(PackError) as err:
        pack(src, f"{prefix}/t.lmdb", num_shards=2, progress=False)
    assert str(err.value) == (f"{prefix}/t.shards.json already exists; pass --overwrite to replace the data set, or "
                              "--resume to finish an upload of the same pack")
    pack(src, f"{prefix}/d.data", num_shards=2, format="lmdb", progress=False)   # no extension to tell the format
    with open_dataset(f"{prefix}/d.shards.json") as store:
        assert store.kind == "lmdb" and len(store) == 48


def test_files_the_labels_file_leaves_out_are_reported_once_with_the_first_shard(photo_folder, s3_env, tmp_path):
    prefix = make_bucket(s3_env, "labels")
    rels = sorted(str(p.relative_to(photo_folder)) for p in photo_folder.rglob("*.jpg"))
    labels = tmp_path / "labels.csv"
    labels.write_text("".join(f"{rel},{rel.split('/')[0]}\n" for rel in rels[1:]))   # the first file unlisted
    report = pack(str(photo_folder), f"{prefix}/t.lmdb", num_shards=3, labels_csv=str(labels), progress=False)
    assert [[s.path for s in r.skipped] for r in report.shards] == [[rels[0]], [], []]
    assert report.packed == 47 and [s.path for s in report.skipped] == [rels[0]]
