"""`pack --layout grid`: every record a restart-grid JPEG with exactly the source's pixels,
damaged image data skipped as corrupt, and FeedLoader on a grid store giving the crops an
original store gives for the same (seed, epoch, index)."""
from __future__ import annotations

import io
import logging
import os
import random
import shutil

import cv2
import numpy as np
import pytest
import simplejpeg
from PIL import Image

from converters import PackOptions, pack
from converters.libjpeg_transcode import TranscodeError, transcode_to_grid
from feedline import FeedLoader, OutputSpec, open_dataset
from feedline.decoders import get_decoder
from feedline.decoders.grid_decoder import GridDecoder, grid_decoder_for, is_grid_store
from feedline.decoders.jpeg_grid import parse_grid
from feedline.decoders.registry import registration
from feedline.core.errors import PackError
from feedline.sample import make_image, make_photo_folder, photo_paths
from feedline.decoders.selection import auto_decoder_name

SIZE = 48
STD = 255 * np.array([0.229, 0.224, 0.225])   # the loader's normalization, in uint8 levels


def resave(jpeg: bytes, **save) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


def damaged_inside(jpeg: bytes) -> bytes:
    """A JPEG whose headers are fine and whose entropy data has stray markers in the middle."""
    out = bytearray(jpeg)
    middle = len(out) // 2
    out[middle:middle + 8] = b"\xff\xd5\x13\x37\xff\xd2\x00\x42"
    return bytes(out)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """Photos at odd sizes, gray, each subsampling, progressive, and a PNG (re-encoded by pack)."""
    root = tmp_path_factory.mktemp("grid") / "images"
    make_photo_folder(str(root), n=12, classes=3, seed=4, gray_fraction=0.2,
                      sizes=[(301, 199), (199, 301), (500, 333), (17, 23)])
    srcs = [cv2.imread(p, cv2.IMREAD_COLOR) for p in photo_paths()[:3]]
    rng = random.Random(1)
    extra = root / "class_003"
    extra.mkdir()
    base = make_image(rng, srcs[0], gray_fraction=0, sizes=[(333, 251)])
    (extra / "a_444.jpg").write_bytes(resave(base, subsampling=0))
    (extra / "b_422.jpg").write_bytes(resave(base, subsampling=1))
    (extra / "c_progressive.jpg").write_bytes(resave(base, subsampling=2, progressive=True))
    Image.open(io.BytesIO(base)).save(extra / "d_converted.png")
    return str(root)


@pytest.fixture(scope="module")
def stores(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("grid-packed")
    original, grid = str(out / "original.lmdb"), str(out / "grid.h5")
    pack(folder, original, PackOptions(progress=False))
    report = pack(folder, grid, PackOptions(progress=False, layout="grid"))
    assert report.skipped == [] and report.packed == 16
    return open_dataset(original), open_dataset(grid)


def test_grid_records_are_grids_with_the_sources_pixels(stores):
    original, grid = stores
    assert is_grid_store(grid) and not is_grid_store(original)
    assert grid.meta["pack_options"]["layout"] == "grid"
    assert original.meta["pack_options"]["layout"] == "original"
    for i in range(len(grid)):
        assert grid.path(i) == original.path(i)
        layout = parse_grid(grid.read(i))
        assert (layout.height, layout.width) == tuple(grid.sizes[i])
        assert np.array_equal(simplejpeg.decode_jpeg(grid.read(i), "rgb", strict=True),
                              simplejpeg.decode_jpeg(original.read(i), "rgb", strict=True)), grid.path(i)
    # The progressive source became one baseline scan.
    progressive = [i for i in range(len(grid)) if grid.path(i).endswith("c_progressive.jpg")][0]
    assert b"\xff\xc2" in bytes(original.read(progressive))
    assert b"\xff\xc2" not in bytes(grid.read(progressive))


def test_the_grid_decoder_wraps_only_grid_stores(stores):
    original, grid = stores
    decoder = get_decoder("auto")
    assert grid_decoder_for(original, decoder) is decoder
    wrapped = grid_decoder_for(grid, decoder)
    assert isinstance(wrapped, GridDecoder) and wrapped.name == decoder.name
    assert grid_decoder_for(grid, wrapped) is wrapped


@pytest.mark.parametrize("train", [True, False])
def test_a_grid_store_gives_the_crops_an_original_store_gives(stores, train):
    original, grid = stores
    kw = dict(batch_size=4, shuffle=True, train=train, size=SIZE, seed=3, num_workers=2,
              output=OutputSpec(channels_last=False))
    with FeedLoader(original, **kw) as a, FeedLoader(grid, **kw) as b:
        assert isinstance(b.source.decoder, GridDecoder) and not isinstance(a.source.decoder, GridDecoder)
        for epoch in range(2):
            a.set_epoch(epoch)
            b.set_epoch(epoch)
            for (xa, ya), (xb, yb) in zip(a, b, strict=True):
                assert torch_equal(ya, yb)
                diff = (xa.float() - xb.float()).abs().numpy()   # normalized units
                per_sample = diff.reshape(len(diff), -1).mean(axis=1)
                assert per_sample.max() < 0.05, per_sample


def torch_equal(a, b) -> bool:
    return bool((a == b).all())


def test_damaged_image_data_is_skipped_as_corrupt(tmp_path):
    src = tmp_path / "images"
    src.mkdir()
    rng = random.Random(2)
    photo = cv2.imread(photo_paths()[0], cv2.IMREAD_COLOR)
    good = make_image(rng, photo, gray_fraction=0, sizes=[(300, 225)])
    (src / "good.jpg").write_bytes(good)
    (src / "damaged.jpg").write_bytes(damaged_inside(good))
    with pytest.raises(ValueError):   # the strict decoder rejects it too
        simplejpeg.decode_jpeg(damaged_inside(good), "rgb", strict=True)
    report = pack(str(src), str(tmp_path / "out.lmdb"), PackOptions(progress=False, layout="grid"))
    assert report.packed == 1
    [skip] = report.skipped
    assert skip.path == "damaged.jpg" and skip.reason.value == "corrupt"
    assert "restart grid" in skip.detail
    with open(tmp_path / "out.lmdb.errors.csv") as fh:
        assert "damaged.jpg,corrupt" in fh.read()


def test_transcoding_is_lossless_and_refuses_damage():
    photo = cv2.imread(photo_paths()[1], cv2.IMREAD_COLOR)
    jpeg = make_image(random.Random(5), photo, gray_fraction=0, sizes=[(211, 157)])
    grid = transcode_to_grid(jpeg)
    assert np.array_equal(simplejpeg.decode_jpeg(grid, "rgb"), simplejpeg.decode_jpeg(jpeg, "rgb"))
    assert parse_grid(grid).markers.size == parse_grid(grid).mcus_down * parse_grid(grid).mcus_across - 1
    with pytest.raises(TranscodeError, match="Corrupt JPEG data"):
        transcode_to_grid(damaged_inside(jpeg))
    with pytest.raises(TranscodeError, match="Premature end"):
        transcode_to_grid(jpeg[:len(jpeg) // 2])
    with pytest.raises(TranscodeError, match="no image"):     # fatal for libjpeg: refused before it
        transcode_to_grid(b"\xff\xd8\xff\xd9")
    assert np.array_equal(simplejpeg.decode_jpeg(transcode_to_grid(jpeg), "rgb"),
                          simplejpeg.decode_jpeg(jpeg, "rgb"))   # and transcoding still works after it


def test_layout_option_is_checked():
    assert PackOptions().layout.value == "original"
    assert PackOptions(layout="GRID").layout.value == "grid"
    with pytest.raises(PackError, match="layout must be one of original, grid"):
        PackOptions(layout="tiles")


def test_cli_packs_a_grid(tmp_path, folder):
    from feedline.cli import main
    out = tmp_path / "cli.lmdb"
    assert main(["pack", folder, str(out), "--layout", "grid", "--quiet"]) == 0
    store = open_dataset(str(out))
    assert is_grid_store(store) and len(store) == 16
    parse_grid(store.read(0))
    shutil.rmtree(tmp_path, ignore_errors=True)
    assert not os.path.exists(out)


def test_a_library_with_other_structures_is_refused_with_a_clear_error(monkeypatch):
    """A libjpeg whose structures differ (simulated: a wrong size passed) fails the probe
    transcode with a PackError naming the fix; libjpeg's fatal error does not end the process."""
    from converters import libjpeg_transcode
    monkeypatch.setattr(libjpeg_transcode, "_checked", False)
    monkeypatch.setattr(libjpeg_transcode, "_COMPRESS_SIZE", 512)
    jpeg = resave(make_image(random.Random(1), cv2.imread(photo_paths()[0]), sizes=[(64, 48)]))
    with pytest.raises(PackError, match="struct mismatch.*--layout original"):
        transcode_to_grid(jpeg)


def test_the_space_check_allows_for_the_grid_being_larger(tmp_path, monkeypatch):
    """The markers make records ~5% larger: room for the files alone is not room for a grid pack."""
    from converters import disk_space
    from feedline.core.errors import DiskFullError
    lengths = [100_000] * 200
    original = disk_space.estimate("hdf5", lengths, 2000)
    grid = disk_space.estimate("hdf5", lengths, 2000, "grid")
    assert 1.05 * sum(lengths) < grid - original + sum(lengths) < 1.1 * sum(lengths)
    monkeypatch.setattr(disk_space, "room_at", lambda folder: disk_space.Room((original + grid) // 2, "/x (tmpfs)"))
    disk_space.check_room(str(tmp_path / "out.h5"), "hdf5", lengths, 2000)
    with pytest.raises(DiskFullError, match="overhead and the grid layout"):
        disk_space.check_room(str(tmp_path / "out.h5"), "hdf5", lengths, 2000, "grid")


def test_a_grid_store_decoded_at_pack_time_gets_the_grid_decoder_not_a_lenient_one(folder, tmp_path, caplog):
    """`--check decode` on a grid store: the crops are spliced and decoded strictly by the
    GridDecoder, so no lenient region decoder is built, nor said to be."""
    if not registration(auto_decoder_name()).lenient_region:
        pytest.skip("decoder 'auto' has no lenient region decode here: nothing to tell apart")
    path = str(tmp_path / "checked-grid.lmdb")
    pack(folder, path, PackOptions(progress=False, layout="grid", check="decode"))
    with caplog.at_level(logging.INFO), FeedLoader(path, batch_size=4, size=SIZE, device="cpu") as loader:
        decoder = loader.source.decoder
        assert isinstance(decoder, GridDecoder) and decoder.whole.strict
        next(iter(loader))
    said = [r.getMessage() for r in caplog.records]
    assert any("restart-marker grid store" in m for m in said), said
    assert not any("leniently" in m for m in said), said
