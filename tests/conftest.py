"""Shared fixtures: small folders of realistic photo-like JPEGs, built once per session."""
from __future__ import annotations

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


def pytest_collection_modifyitems(config, items):
    skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    try:
        import nvidia.dali  # noqa: F401
        have_dali = True
    except ImportError:
        have_dali = False
    skip_dali = pytest.mark.skip(reason="needs NVIDIA DALI: pip install nvidia-dali-cuda120")
    for item in items:
        if "cuda" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_cuda)
        if "dali" in item.keywords and not have_dali:
            item.add_marker(skip_dali)
