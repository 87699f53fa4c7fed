"""The DALI path: a CPU-only pipeline (device_id=None) checked against a PIL reference;
the 'mixed' GPU path with the same checks when a GPU is present."""
from __future__ import annotations

import io
import shutil
import subprocess
import sys

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

import feedline
from feedline.planning.augment import AugmentSpec
from feedline.core.choices import Order
from feedline.core.config import LoaderConfig, OutputSpec
from feedline.core.errors import BackendUnavailable, DecodeError, StoreError
from feedline.planning.plan import EpochPlan
from feedline.sample import make_photo_folder
from feedline.sources.substitute import substitute_sample
from feedline.core.stats import LoaderStats

pytestmark = pytest.mark.dali

SIZE = (48, 64)  # not square: a swapped H and W shows up
SIZES = [(160, 120), (120, 160), (200, 150), (96, 96), (240, 180), (300, 225)]
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("dali") / "images"
    make_photo_folder(str(root), n=12, classes=3, seed=7, sizes=SIZES)
    return root


@pytest.fixture
def store(folder):
    with feedline.open_dataset(folder) as s:
        yield s


@pytest.fixture
def corrupt_store(folder, tmp_path):
    """A copy of the folder whose record 4 holds garbage; sizes are read before the damage."""
    root = tmp_path / "images"
    shutil.copytree(folder, root)
    s = feedline.open_dataset(root)
    s.sizes  # noqa: B018  (FolderStore reads headers on first use)
    (root / s.path(4)).write_bytes(b"not a jpeg " * 100)
    yield s
    s.close()


def dali_batches(store, output=OutputSpec(), spec=AugmentSpec(size=SIZE, train=True), **kw):
    from feedline.sources import make_source
    config = LoaderConfig(batch_size=5, order=Order.RANDOM, seed=3, num_workers=2, engine="dali", decoder=None,
                          augment=spec, output=output, **kw)
    return make_source(store, config)


def epoch_plan(spec=AugmentSpec(size=SIZE, train=True), epoch=1, seed=3, batch_size=5):
    return EpochPlan(spec, seed=seed, epoch=epoch, order=Order.RANDOM, batch_size=batch_size, drop_last=False)


def epoch(store, spec=AugmentSpec(size=SIZE, train=True), epoch=1, seed=3, batch_size=5):
    return list(epoch_plan(spec, epoch, seed, batch_size).batches(store.labels, store.sizes))


def run(dali, spec=AugmentSpec(size=SIZE, train=True), epoch=1, start=0, stats=None):
    """DALI's batches of ``epoch`` from batch ``start``, through the BatchSource protocol."""
    return dali.run(epoch_plan(spec, epoch), start, stats if stats is not None else LoaderStats())


def reference(store, index, box, flip, size=SIZE) -> np.ndarray:
    """H x W x 3 float 0..255: PIL decode, crop the plan's box (an evaluation crop's edges
    rounded to whole pixels, as DALI cuts it), bilinear resize, mirror."""
    top, left = round(float(box[0])), round(float(box[1]))
    h, w = round(float(box[0] + box[2])) - top, round(float(box[1] + box[3])) - left
    with Image.open(io.BytesIO(bytes(store.read(index)))) as im:
        crop = im.convert("RGB").crop((left, top, left + w, top + h))
    out = np.asarray(crop.resize((size[1], size[0]), Image.BILINEAR), dtype=np.float32)
    return out[:, ::-1] if flip else out


def normalized(x: np.ndarray) -> np.ndarray:
    return (x / 255.0 - np.array(MEAN, np.float32)) / np.array(STD, np.float32)


def check_against_reference(store, plans, results, tol=0.05):
    """Mean absolute difference per image in normalized units; a missed mirror gives > 0.2."""
    assert len(results) == len(plans)
    for plan, (images, labels) in zip(plans, results):
        assert images.shape == (len(plan), 3, *SIZE)
        assert labels.dtype == torch.int64 and labels.tolist() == plan.labels.tolist()
        got = images.float().permute(0, 2, 3, 1).cpu().numpy()
        for k, index in enumerate(plan.indices.tolist()):
            want = normalized(reference(store, index, plan.boxes[k], plan.flips[k]))
            assert np.abs(got[k] - want).mean() < tol, f"record {index}"


def test_matches_pil_reference_in_plan_order(store):
    plans = epoch(store)
    assert [len(p) for p in plans] == [5, 5, 2]                 # partial last batch
    assert plans[0].flips.any() or plans[1].flips.any()         # the mirror input is exercised
    dali = dali_batches(store)
    results = list(run(dali))
    dali.close()
    images = results[0][0]
    assert images.dtype == torch.float32 and images.device.type == "cpu"
    assert images.is_contiguous()   # the CPU's default layout: NCHW
    check_against_reference(store, plans, results)


def test_same_plans_same_pixels(store):
    """Eval plans (center crops, no flips): two runs give identical batches, equal to the reference."""
    spec = AugmentSpec(size=SIZE, train=False)
    plans = epoch(store, spec)   # center crops, no flips
    dali = dali_batches(store, spec=spec)
    first = [x.clone() for x, _ in run(dali, spec)]
    again = [x for x, _ in run(dali, spec)]
    dali.close()
    assert len(first) == len(again) == len(plans)
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    check_against_reference(store, plans, list(zip(first, [torch.from_numpy(p.labels) for p in plans])))


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_and_layouts(store, dtype, channels_last):
    plans = epoch(store)[:1]
    dali = dali_batches(store, OutputSpec(dtype=dtype, channels_last=channels_last))
    images, labels = next(run(dali))
    dali.close()
    assert images.dtype == dtype
    assert images.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    check_against_reference(store, plans, [(images, labels)], tol=0.06)


def test_uint8_without_normalization(store):
    plans = epoch(store)
    dali = dali_batches(store, OutputSpec(mean=None, std=None))
    results = list(run(dali))
    dali.close()
    assert len(results) == len(plans)
    for plan, (images, _) in zip(plans, results):
        assert images.dtype == torch.uint8
        assert images.is_contiguous()
        got = images.permute(0, 2, 3, 1).numpy().astype(np.float32)
        for k, index in enumerate(plan.indices.tolist()):
            assert np.abs(got[k] - reference(store, index, plan.boxes[k], plan.flips[k])).mean() < 2


def test_interrupted_run_then_a_new_run(store):
    dali = dali_batches(store)
    full = [x.clone() for x, _ in run(dali)]
    it = run(dali)
    next(it)
    it.close()                                  # abandoned with batches in flight
    again = [x for x, _ in run(dali)]
    resumed = [x for x, _ in run(dali, start=1)]
    dali.close()
    assert len(full) == len(again) == 3 and len(resumed) == 2
    assert all(torch.equal(a, b) for a, b in zip(full, again))
    assert all(torch.equal(a, b) for a, b in zip(full[1:], resumed))


def test_corrupt_record_raises_with_index_and_path(corrupt_store):
    plans = epoch(corrupt_store)
    bad_batch = next(n for n, p in enumerate(plans) if 4 in p.indices)
    delivered = 0
    dali = dali_batches(corrupt_store)
    with pytest.raises(DecodeError) as info:
        for _ in run(dali):
            delivered += 1
    dali.close()
    assert info.value.index == 4 and info.value.path == corrupt_store.path(4)
    assert corrupt_store.path(4) in str(info.value)
    assert delivered <= bad_batch


def test_record_smaller_than_the_store_says(folder, tmp_path):
    """DALI reports a crop window outside the image; the check names the record and the sizes."""
    root = tmp_path / "images"
    shutil.copytree(folder, root)
    with feedline.open_dataset(root) as s:
        plans = epoch(s)
        ok, buf = cv2.imencode(".jpg", np.full((20, 30, 3), 128, np.uint8))
        (root / s.path(4)).write_bytes(buf.tobytes())
        dali = dali_batches(s)
        with pytest.raises(DecodeError, match="20x30") as info:
            list(run(dali))
        dali.close()
    assert info.value.index == 4


def test_corrupt_record_substituted(corrupt_store):
    spec = AugmentSpec(size=SIZE, train=True)
    plans = epoch(corrupt_store, spec)
    dali = dali_batches(corrupt_store, on_error="substitute")
    stats, stats2 = LoaderStats(), LoaderStats()
    results = list(run(dali, stats=stats))
    assert stats.substituted == 1 and [r.index for r in stats.bad_records] == [4]
    second = list(run(dali, epoch=2, stats=stats2))   # known bad: no rebuild needed
    assert stats2.substituted == 1 and stats2.bad_records[0].epoch == 2
    dali.close()
    assert [len(x) for x, _ in results] == [len(p) for p in plans]
    assert len(second) == len(plans)
    n, p = next((n, p) for n, p in enumerate(plans) if 4 in p.indices)
    k = p.indices.tolist().index(4)
    sub, box, flip = substitute_sample(spec, 3, 1, 4, 0, corrupt_store.sizes)
    images, labels = results[n]
    assert labels[k] == corrupt_store.labels[sub]
    want = normalized(reference(corrupt_store, sub, box, flip))
    assert np.abs(images[k].permute(1, 2, 0).numpy() - want).mean() < 0.1
    rest = [j for j in range(len(p)) if j != k]
    assert labels[rest].tolist() == p.labels[rest].tolist()


def test_unreadable_record(folder, tmp_path):
    root = tmp_path / "images"
    shutil.copytree(folder, root)
    with feedline.open_dataset(root) as s:
        plans = epoch(s)
        (root / s.path(6)).unlink()
        dali = dali_batches(s)
        with pytest.raises(DecodeError, match=s.path(6)) as info:
            list(run(dali))
        dali.close()
        assert info.value.index == 6 and isinstance(info.value.__cause__, StoreError)
        dali, stats = dali_batches(s, on_error="substitute"), LoaderStats()
        assert [len(x) for x, _ in run(dali, stats=stats)] == [len(p) for p in plans]
        dali.close()
        assert stats.substituted == 1 and stats.bad_records[0].reason == "unreadable"


def test_missing_dali_is_backend_unavailable(monkeypatch):
    from feedline.sources import dali_graph
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    with pytest.raises(BackendUnavailable, match="pip install nvidia-dali-cuda130"):
        dali_graph.import_dali()


def test_importing_feedline_does_not_import_dali():
    code = ("import sys, feedline, feedline.sources.dali; "
            "sys.exit('nvidia.dali' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.cuda
def test_mixed_gpu_path_matches_reference(store):
    plans = epoch(store)
    dali = dali_batches(store, OutputSpec(device="cuda:0"))
    results = list(run(dali))
    dali.close()
    images, labels = results[0]
    assert images.device == torch.device("cuda", 0) and labels.device == images.device
    assert images.dtype == torch.float32 and images.is_contiguous(memory_format=torch.channels_last)
    # nvJPEG's IDCT and the GPU resize differ slightly from libjpeg-turbo and PIL.
    check_against_reference(store, plans, results, tol=0.1)
