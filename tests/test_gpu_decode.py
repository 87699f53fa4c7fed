"""Pixels decoded on the GPU equal the CPU's, for 320 real photos, batch after batch.

The oracle is PIL (libjpeg-turbo) decoding each record on the CPU, cropping the plan's box
and resizing by hand: an independent path to the same pixels. nvJPEG's IDCT and chroma
upsampling and the GPU resize differ from it by a little; a wrong or corrupted image by
a lot (two different photos differ by ~0.8 in normalized units, ~60 levels in uint8).

The consumer's stream is held busy (a spin kernel) while each batch's reads are queued
behind it, and each batch is dropped before the next is decoded: the conditions under
which the H100/H200 hardware JPEG decoder has been seen writing its output before work
already queued on its stream had run (torchvision#9606, torchcodec#1634). A decoder or
source that is not ordered after the consumer's queued work corrupts earlier batches
or the "victim" tensors freed just before each decode, whose sums are exact integers.
"""
from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

import feedline
from feedline.planning.plan import EpochPlan
from cuda_helpers import hold

pytestmark = pytest.mark.cuda

N, BATCH, SIZE = 320, 32, (96, 96)
HOLD_MS = 40
MEAN, STD = np.array((0.485, 0.456, 0.406), np.float32), np.array((0.229, 0.224, 0.225), np.float32)
# Images are compared as means of 4 x 4 pixel blocks: resampling filters (INTER_AREA, PIL's
# bilinear, the GPU resize) and chroma upsampling differ most on the photos' sensor noise,
# which block means average out, while a wrong image or a corrupted band of rows still shows.
# Measured on the CPU here: feedline's CPU decoders vs the PIL crop differ by at most 0.045
# (mean) and 0.072 (worst of 8 bands) in normalized units; two different photos by 0.74; 12
# rows of another photo in a 96-row crop give 0.44 in their band.
IMAGE_TOL, BAND_TOL = 0.1, 0.25
# Whole-image decode, in uint8 levels: libjpeg-turbo's fast DCT + fast upsampling vs PIL
# differ by at most 1.1 (mean and band); one grey 16-row MCU row gives 6.3 in its band.
PIXEL_TOL, PIXEL_BAND_TOL = 3.0, 4.0

@pytest.fixture(scope="module")
def packed_photos(tmp_path_factory):
    """320 photo-like JPEGs of ImageNet-like sizes: 4:2:0 as made, and every fourth one
    re-encoded 4:4:4, 4:2:2 or progressive; 5% gray. Packed to LMDB."""
    from converters import pack
    from feedline.sample import make_photo_folder
    root = tmp_path_factory.mktemp("gpu-photos") / "images"
    make_photo_folder(str(root), n=N, classes=4, seed=21)
    variants = [[cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444],
                [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422],
                [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]]
    for i, path in enumerate(sorted(root.rglob("*.jpg"))):
        if i % 4:
            image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
            ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90, *variants[i % 4 - 1]])
            assert ok
            path.write_bytes(data.tobytes())
    out = root.parent / "photos.lmdb"
    pack(str(root), str(out))
    return out


@pytest.fixture(scope="module")
def records(packed_photos):
    with feedline.open_dataset(packed_photos) as store:
        return [bytes(memoryview(store.read(i))) for i in range(len(store))]


def pil_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def pil_crop(data: bytes, box, flip: bool) -> np.ndarray:
    """H x W x 3 normalized float: PIL decode, the plan's crop, bilinear resize, mirror."""
    top, left, h, w = (int(v) for v in box)
    with Image.open(io.BytesIO(data)) as im:
        crop = im.convert("RGB").crop((left, top, left + w, top + h)).resize(SIZE[::-1], Image.BILINEAR)
    out = np.asarray(crop, dtype=np.float32)[:, ::-1] if flip else np.asarray(crop, dtype=np.float32)
    return (out / 255.0 - MEAN) / STD


def block_means(x: np.ndarray, f: int = 4) -> np.ndarray:
    h, w, c = x.shape
    return x[:h - h % f, :w - w % f].astype(np.float32).reshape(h // f, f, w // f, f, c).mean(axis=(1, 3))


def differences(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """Mean absolute difference of the 4 x 4 block means, and the worst over 8 horizontal bands."""
    diff = np.abs(block_means(got) - block_means(want))
    return float(diff.mean()), max(float(band.mean()) for band in np.array_split(diff, 8, axis=0))


def pinned(shape, dtype, stride=None) -> torch.Tensor:
    """Page-locked host memory, allocated before the loop: a page-locked allocation between
    two GPU commands orders the streams, which would hide the hazards looked for here."""
    if stride is None:
        return torch.empty(shape, dtype=dtype, pin_memory=True)
    return torch.empty_strided(shape, stride, dtype=dtype, pin_memory=True)


# -- whole-image decode on the GPU vs PIL --------------------------------------------------
def nvimgcodec_decode(records, backend, shapes):
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    nv = load_nvimgcodec()
    host = [pinned(shape, torch.uint8) for shape in shapes]
    decoded = [False] * len(records)
    decoder = nv.Decoder(backends=[nv.Backend(getattr(nv, backend))])
    # A stream of its own, not the legacy default stream, whose implicit synchronization
    # with other streams could hide a decoder that does not order itself after queued work.
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for start in range(0, len(records), BATCH):
            hold(HOLD_MS)  # queued work on the stream the decoder is given
            images = decoder.decode([nv.CodeStream(b) for b in records[start:start + BATCH]],
                                    cuda_stream=stream.cuda_stream)
            for k, image in enumerate(images):
                if image is not None:   # copied when the stream gets there, after the hold
                    host[start + k].copy_(torch.as_tensor(image, device="cuda"), non_blocking=True)
                    decoded[start + k] = True
            del images      # the decoder's buffers are released while the copies still wait
    torch.cuda.synchronize()
    return [h if ok else None for h, ok in zip(host, decoded)]


@pytest.mark.parametrize("backend", ["HW_GPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU"])
def test_nvimgcodec_gpu_decode_equals_pil_batch_after_batch(records, backend):
    """nvJPEG on CUDA, the hybrid path and the hardware decoder, each alone. The hardware
    decoder declines what it cannot do (progressive JPEGs): those give None."""
    wanted = [pil_rgb(r) for r in records]
    host = nvimgcodec_decode(records, backend, [w.shape for w in wanted])
    decoded = [(i, h) for i, h in enumerate(host) if h is not None]
    if backend == "HW_GPU_ONLY" and not decoded:
        pytest.skip(f"{torch.cuda.get_device_name()} has no hardware JPEG decoder")
    if backend != "HW_GPU_ONLY":
        assert len(decoded) == len(records)
    else:
        assert len(decoded) >= len(records) // 2     # every non-progressive photo, at least
    bad = []
    for i, h in decoded:
        want, got = wanted[i], h.numpy()
        assert got.shape == want.shape, f"record {i}"
        mean, band = differences(got, want)
        if mean > PIXEL_TOL or band > PIXEL_BAND_TOL:
            bad.append((i, round(mean, 2), round(band, 2)))
    assert not bad, f"{backend}: {len(bad)} images differ from PIL's decode (record, mean, worst band): {bad[:10]}"


@pytest.mark.dali
@pytest.mark.parametrize("hw_load", [0.0, 1.0], ids=["nvjpeg-cuda", "hardware"])
def test_dali_mixed_decode_equals_pil_batch_after_batch(records, hw_load):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=BATCH, num_threads=4, device_id=torch.cuda.current_device(), prefetch_queue_depth=1)
    def pipeline():
        jpegs = fn.external_source(name="jpegs", dtype=types.UINT8, ndim=1)
        return fn.decoders.image(jpegs, device="mixed", output_type=types.RGB, hw_decoder_load=hw_load)

    pipe = pipeline()
    pipe.build()
    bad = []
    for start in range(0, len(records), BATCH):
        batch = records[start:start + BATCH]
        pipe.feed_input("jpegs", [np.frombuffer(b, np.uint8) for b in batch])
        (out,) = pipe.run()
        cpu = out.as_cpu()
        for k, data in enumerate(batch):
            mean, band = differences(np.array(cpu[k]), pil_rgb(data))
            if mean > PIXEL_TOL or band > PIXEL_BAND_TOL:
                bad.append((start + k, round(mean, 2), round(band, 2)))
    assert not bad, f"DALI mixed (hw_decoder_load={hw_load}): (record, mean, worst band): {bad[:10]}"


# -- through FeedLoader: crops, flips, normalization, on a busy consumer stream --------------
@pytest.mark.parametrize("engine", [pytest.param("dali", marks=pytest.mark.dali), "gpu"])
def test_gpu_sources_match_pil_batch_after_batch_on_a_busy_stream(packed_photos, records, engine):
    """FeedLoader(engine=...) on CUDA: every batch, image by image, equals PIL doing the
    plan's crop by hand; freed victim tensors are never written by the decode."""
    loader = feedline.FeedLoader(packed_photos, batch_size=BATCH, shuffle=True, train=True, size=SIZE,
                                 engine=engine, num_workers=4, device="cuda", dtype=torch.float32, seed=3)
    c = loader.config
    plans = list(EpochPlan(c.augment, c.seed, 0, c.order, c.batch_size, c.drop_last, c.rank, c.world_size,
                           c.even_shards).batches(loader.store.labels, loader.store.sizes))
    nbytes = BATCH * 3 * SIZE[0] * SIZE[1] * 4     # a float32 batch: what the source may allocate next
    h, w = SIZE
    image_bufs = [pinned((BATCH, 3, h, w), torch.float32, (3 * h * w, 1, 3 * w, 3)) for _ in plans]  # channels_last
    label_bufs = [pinned((BATCH,), torch.int64) for _ in plans]
    got, victim_sums = [], []
    batches = iter(loader)
    while True:
        # Filled, held, summed, all in the consumer stream's order, and freed before the next
        # batch is asked for; no synchronization here, or the queued reads would be done already.
        victims = [torch.full((nbytes,), v, dtype=torch.uint8, device="cuda") for v in (1, 2, 3)]
        hold(HOLD_MS)
        victim_sums.append(sum(v.sum(dtype=torch.float64) for v in victims))   # queued behind the hold
        del victims                                                            # freed while still to be read
        try:
            images, labels = next(batches)
        except StopIteration:
            break
        hold(HOLD_MS)
        n = len(got)
        assert n < len(plans) and images.is_contiguous(memory_format=torch.channels_last)
        got.append((image_bufs[n].copy_(images, non_blocking=True), label_bufs[n].copy_(labels, non_blocking=True)))
        del images, labels
    torch.cuda.synchronize()
    loader.close()
    assert len(got) == len(plans) == N // BATCH
    assert [float(s) for s in victim_sums] == [6.0 * nbytes] * len(victim_sums), \
        "the decode wrote into memory the consumer's queued work was still reading"
    bad = []
    for plan, (images, labels) in zip(plans, got, strict=True):
        assert labels.tolist() == plan.labels.tolist()
        assert images.shape == (len(plan), 3, *SIZE)
        for k, index in enumerate(plan.indices.tolist()):
            want = pil_crop(records[index], plan.boxes[k], bool(plan.flips[k]))
            mean, band = differences(images[k].permute(1, 2, 0).numpy(), want)
            if mean > IMAGE_TOL or band > BAND_TOL:
                bad.append((plan.number, index, round(mean, 3), round(band, 3)))
    assert not bad, f"engine={engine!r}: (batch, record, mean, worst band) off the PIL crop: {bad[:10]}"
