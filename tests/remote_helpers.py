"""Shared pieces of the remote tests: buckets on the session's S3 server, packs uploaded to them."""
from __future__ import annotations


def make_bucket(server, name: str) -> str:
    """A new empty bucket ``name`` (3+ characters) on ``server``; returns its s3:// URL prefix."""
    import boto3   # the test extra's; imported here, so the file collects without it
    client = boto3.client("s3", **{k: v for k, v in {
        "endpoint_url": server.endpoint, "aws_access_key_id": server.env()["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": server.env()["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1"}.items()})
    client.create_bucket(Bucket=name)
    return f"s3://{name}"


def records(store) -> list[tuple[bytes, int, str]]:
    return [(bytes(store.read(i)), int(store.labels[i]), store.path(i)) for i in range(len(store))]
