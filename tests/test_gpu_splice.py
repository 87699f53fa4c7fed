"""GridSplice, the GPU engine's splice on a grid store (issue 24 item 3): the spliced
batch decoded by nvImageCodec equals the full decode's crops. On the CPU here through
nvImageCodec's CPU backend; on a GPU (`cuda` tests) through the hardware decoder and
nvJPEG's CUDA decoder, pixel for pixel against the CPU, with the decoder's stream drained
before each decode (torchvision#9606) and the consumer's stream busy meanwhile."""
from __future__ import annotations

import io
import random

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from converters.libjpeg_transcode import transcode_to_grid
from feedline.planning.augment import random_resized_crop, uniforms
from feedline.decoders.base import Box
from feedline.decoders.grid_decoder import GridDecoder
from feedline.decoders.nvimgcodec_library import load_nvimgcodec
from feedline.decoders.simplejpeg_decoder import SimplejpegDecoder
from feedline.core.errors import DecodeError
from feedline.sample import make_image, photo_paths
from feedline.sources.gpu_splice import GridSplice

nv = load_nvimgcodec()
PARAMS = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.SRGB)   # as GpuDecodeBatches
# Spliced vs full decode differ only by chroma upsampling along the crop's MCU-aligned edges:
# a fraction of a level on average; a crop one MCU off, or of another photo, by tens of levels.
MEAN_TOL, WORST_TOL = 0.6, 1.5


def resave(jpeg: bytes, **save) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


@pytest.fixture(scope="module")
def grids() -> list[bytes]:
    srcs = [cv2.imread(p, cv2.IMREAD_COLOR) for p in photo_paths()[:4]]
    rng = random.Random(24)

    def photo(size, k, gray=0.0):
        return make_image(rng, srcs[k % len(srcs)], gray_fraction=gray, sizes=[size])

    made = [photo((500, 333), 0), photo((301, 199), 1), photo((199, 301), 2, gray=1.0),
            resave(photo((640, 480), 3), subsampling=0), resave(photo((333, 251), 1), subsampling=1),
            resave(photo((420, 300), 2), subsampling=2, progressive=True)]
    return [transcode_to_grid(m) for m in made]


def boxes(h: int, w: int) -> list[Box]:
    train = random_resized_crop([h] * 6, [w] * 6, uniforms(7, 0, range(6), 22))
    edges = [(0, 0, h, w), (0, 0, 1, 1), (h - 1, w - 1, 1, 1), (h - 9, w - 7, 9, 7), (16, 16, 16, 16)]
    return [Box(*map(int, b)) for b in [*train, *edges]]


def cpu_decoder():
    return nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=1,
                      backends=[nv.Backend(nv.CPU_ONLY)])


def samples(grids):
    full = SimplejpegDecoder()
    out = []
    for data in grids:
        h, w = full.decode(data).shape[:2]
        out += [(data, box) for box in boxes(h, w)]
    return out


def full_crops(decoder, batch) -> list[np.ndarray]:
    """Each sample's crop of its whole image, decoded by ``decoder`` (the reference)."""
    whole = decoder.decode([nv.CodeStream(d) for d, _ in batch], params=PARAMS)
    return [np.asarray(im.cpu() if hasattr(im, "cpu") else im)[b.top:b.top + b.height, b.left:b.left + b.width]
            for im, (_, b) in zip(whole, batch)]


def spliced_crops(decoder, batch, splice: GridSplice, stream=None) -> list[np.ndarray]:
    streams = [splice.stream(k, d, b) for k, (d, b) in enumerate(batch)]
    kwargs = {"cuda_stream": stream.cuda_stream} if stream is not None else {}
    crops = splice.crops(list(decoder.decode(streams, params=PARAMS, **kwargs)))
    return [c.cpu().numpy() for c in crops]


def assert_same(got, want, batch):
    assert len(got) == len(want)
    for (data, box), g, w in zip(batch, got, want):
        assert g.shape == w.shape == (box.height, box.width, 3), box
        diff = np.abs(g.astype(np.float32) - w)
        assert diff.mean() < MEAN_TOL and np.percentile(diff, 99.9) < 16 * WORST_TOL, (box, diff.mean())


def test_the_spliced_batch_decodes_to_the_full_decodes_crops_on_the_cpu(grids):
    batch = samples(grids)
    decoder = cpu_decoder()
    want = full_crops(decoder, batch)
    assert_same(spliced_crops(decoder, batch, GridSplice(nv)), want, batch)


def test_a_crop_cut_at_the_wrong_place_would_be_caught(grids):
    """The comparison above discriminates: the same crop one MCU further is far off."""
    data = grids[0]
    box, moved = Box(40, 48, 96, 96), Box(40, 64, 96, 96)
    decoder = cpu_decoder()
    (want,) = full_crops(decoder, [(data, box)])
    (got,) = spliced_crops(decoder, [(data, moved)], GridSplice(nv))
    assert np.abs(got.astype(np.float32) - want).mean() > 5 * MEAN_TOL


def test_a_damaged_grid_is_refused_by_the_splice_and_by_the_cpu_fallback(grids):
    data = bytearray(grids[1])
    at = data.index(b"\xff\xd3", 600)
    data[at + 1] = 0xD5                          # a restart marker out of sequence
    with pytest.raises(DecodeError, match="out of sequence"):
        GridSplice(nv).stream(0, bytes(data), Box(0, 0, 16, 16))
    checked = GridDecoder(SimplejpegDecoder())   # what grid_decoder_for gives GpuDecodeBatches' fallback
    with pytest.raises(DecodeError, match="not a restart-grid JPEG"):
        checked.decode(bytes(data))
    assert checked.decode(grids[1]).shape[2] == 3


def test_a_block_of_the_wrong_size_goes_to_the_cpu_fallback(grids):
    splice = GridSplice(nv)
    splice.stream(0, grids[0], Box(0, 0, 40, 40))
    splice.stream(1, grids[0], Box(0, 0, 40, 40))
    other = cpu_decoder().decode([nv.CodeStream(grids[1])], params=PARAMS)[0]   # not a 48x48 block
    crops = splice.crops([other, None])
    assert crops == [None, None]


# -- on a GPU -----------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["HW_GPU_ONLY", "GPU_ONLY"])
def test_the_gpu_decodes_spliced_crops_like_the_cpu(grids, backend):
    from cuda_helpers import hold
    batch = samples(grids)
    want = full_crops(cpu_decoder(), batch)
    decoder = nv.Decoder(backends=[nv.Backend(getattr(nv, backend))])
    stream = torch.cuda.Stream()
    splice = GridSplice(nv, "cuda")
    for _ in range(3):   # batch after batch, each decode after queued work on another stream
        hold(40, stream)       # work queued on the decoder's stream ...
        stream.synchronize()   # ... drained before decoding (torchvision#9606), as GpuDecodeBatches does
        streams = [splice.stream(k, d, b) for k, (d, b) in enumerate(batch)]
        images = list(decoder.decode(streams, params=PARAMS, cuda_stream=stream.cuda_stream))
        if backend == "HW_GPU_ONLY" and all(i is None for i in images):
            pytest.skip(f"{torch.cuda.get_device_name()} has no hardware JPEG decoder")
        with torch.cuda.stream(stream):
            crops = [c.clone() if c is not None else None for c in splice.crops(images)]
        stream.synchronize()
        got = [(c.cpu().numpy(), w, s) for c, w, s in zip(crops, want, batch) if c is not None]
        assert len(got) >= len(batch) // 2
        assert_same([g for g, _, _ in got], [w for _, w, _ in got], [s for _, _, s in got])


@pytest.mark.cuda
def test_the_gpu_engine_on_a_grid_store_matches_the_cpu_threads(tmp_path):
    """FeedLoader(engine='gpu') on a grid pack: the same batches as the CPU threads give."""
    import feedline
    from converters import PackOptions, pack
    from feedline.sample import make_photo_folder
    root = tmp_path / "images"
    make_photo_folder(str(root), n=96, classes=3, seed=5)
    out = tmp_path / "grid.lmdb"
    pack(str(root), str(out), PackOptions(progress=False, layout="grid"))
    kwargs = dict(batch_size=32, shuffle=True, train=True, size=96, seed=1, dtype=torch.float32)
    gpu = feedline.FeedLoader(out, engine="gpu", device="cuda", **kwargs)
    cpu = feedline.FeedLoader(out, engine="threads", device="cpu", **kwargs)
    for (a, la), (b, lb) in zip(gpu, cpu, strict=True):
        assert torch.equal(la.cpu(), lb)
        # 4 x 4 block means, normalized units (as test_gpu_decode): the GPU's antialiased resize of
        # the full-scale crop and the CPU's DCT-scaled one differ on sensor noise, a wrong crop by ~0.8
        blocks = torch.nn.functional.avg_pool2d((a.cpu().float() - b.float()), 4).abs().mean(dim=(1, 2, 3))
        assert float(blocks.max()) < 0.1, blocks
    gpu.close()
    cpu.close()


def test_the_grid_splice_bench_runs_its_cpu_path(packed_lmdb, tmp_path):
    """bench/gpu/grid_splice.py --cpu-smoke: both ways decode every box; the figures mean nothing here."""
    import json

    from bench.gpu import grid_splice
    out = tmp_path / "grid_splice.json"
    assert grid_splice.main(["--data", str(packed_lmdb), "--out", str(out), "--cpu-smoke"]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["backend"] == "CPU_ONLY" and row["reason"] is None
    assert row["decoded"] == {"region": 16, "splice": 16} and row["splice_img_s"] > 0
    with pytest.raises(SystemExit):
        grid_splice.main(["--data", str(packed_lmdb), "--out", str(out), "--images", "0"])


def test_a_new_batch_forgets_the_crops_of_one_that_failed(grids):
    splice = GridSplice(nv)
    splice.stream(0, grids[0], Box(0, 0, 40, 40))     # its decode failed: crops() never came
    splice.begin()
    image = cpu_decoder().decode([nv.CodeStream(grids[1])], params=PARAMS)[0]   # a whole image, not spliced
    (kept,) = splice.crops([image])
    assert kept is image
