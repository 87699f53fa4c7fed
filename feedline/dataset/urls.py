"""URLs among paths: which schemes feedline reads, and one clear refusal for the others.

A path such as ``s3://bucket/x.lmdb`` must never be taken for a local folder named ``s3:``.
"""
from __future__ import annotations

import os
import re

from ..core.errors import StoreError

SCHEMES = ("s3",)   # the object stores feedline reads and writes (feedline.stores.remote)
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(path) -> str | None:
    """The scheme of ``path`` when it is a URL (``s3``, ``gs``, ``http``...), else None."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    match = _URL.match(os.fspath(path)) if isinstance(path, str) else None
    return match[1].lower() if match else None


def check_url(path: str) -> str:
    """``path``'s scheme when feedline reads it; a one-line StoreError naming the schemes it reads otherwise."""
    scheme = url_scheme(path)
    if scheme not in SCHEMES:
        raise StoreError(f"{path}: feedline does not read {scheme}:// URLs; it reads local paths and "
                         f"{', '.join(s + '://' for s in SCHEMES)} (an S3 or S3-compatible bucket). "
                         "Copy the data to a local disk or to such a bucket")
    return scheme


def split_url(url: str) -> tuple[str, str, str]:
    """``s3://bucket/a/b.json`` -> ("s3", "bucket", "a/b.json"); StoreError without a bucket or key."""
    scheme = check_url(url)
    rest = url[len(scheme) + 3:]
    bucket, _, key = rest.partition("/")
    if not bucket or not key or key.endswith("/"):
        raise StoreError(f"{url}: name a bucket and an object in it, as {scheme}://BUCKET/train.shards.json")
    return scheme, bucket, key
