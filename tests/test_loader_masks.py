"""Masks delivered by FeedLoader: quadrant images whose masks mark each quadrant's class
(masks_helpers), so that wherever the crop, flip, a geometric op, erasing or CutMix puts a
pixel, its class must be its colour's; each mask also equal to its record's mask through the
plan's own crop and flip (`feedline.dataset.mask_sampling`, checked by hand in test_mask_sampling),
on worker threads and processes, LMDB, HDF5 and shards; substitutes; every refusal."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from masks_helpers import COLOURS, IGNORE, check_on_pixels, mask_folder, packed

from converters import pack
from feedline import AugmentSpec, FeedLoader, OutputSpec, TransformSpec
from feedline.planning.augment import plan as plan_augment
from feedline.decoders.base import Box
from feedline.dataset.mask_sampling import sample_mask
from feedline.transforms import CutMix, Mixup, MixUp, RandAugment, RandomErasing, TimmRandAugment, TrivialAugmentWide
from feedline.transforms.runner import SampleTransforms

KW = dict(batch_size=3, device="cpu", decoder="pil", seed=3)
PIXELS = OutputSpec(mean=None)   # uint8 images: their colours checked as they are


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """{kind: path} of one quadrant folder packed as LMDB, HDF5 and 2 shards (labels: the ids)."""
    root = str(tmp_path_factory.mktemp("quadrants"))
    src, labels, masks = mask_folder(root, n=6)
    out = {"lmdb": os.path.join(root, "q.lmdb"), "h5": os.path.join(root, "q.h5")}
    for path in out.values():
        pack(src, path, labels_csv=labels, progress=False)
    pack(src, os.path.join(root, "s.lmdb"), labels_csv=labels, num_shards=2, progress=False)
    out["shards"] = os.path.join(root, "s.shards.json")
    return out


def batches(path, **kw):
    with FeedLoader(path, **{**KW, "output": PIXELS, **kw}) as loader:
        store = loader.dataset
        out = [(images.clone(), {k: v.clone() for k, v in t.items()}) for images, t in loader]
    return store, out


def planned_masks(store, indices, spec: AugmentSpec, seed: int, epoch: int = 0) -> np.ndarray:
    """Each record's mask through its own planned crop and flip."""
    idx = np.asarray(indices)
    crops, flips = plan_augment(spec, seed, epoch, idx, store.sizes[idx, 0], store.sizes[idx, 1])
    out = np.empty((len(idx), *spec.size), np.int64)
    for k, i in enumerate(idx.tolist()):
        sample_mask(store.mask(i), Box(*crops[k].tolist()), bool(flips[k]), out[k], IGNORE)
    return out


def record_ids(store, labels) -> list[int]:
    """The record of each delivered label (each record's label is its own id)."""
    return [int(np.flatnonzero(store.labels == k)[0]) for k in labels.tolist()]


@pytest.mark.parametrize("kind", ["lmdb", "h5", "shards"])
@pytest.mark.parametrize("engine", ["threads", "processes"])
@pytest.mark.parametrize("train", [True, False])
def test_masks_follow_the_crop_and_flip_of_their_pixels(stores, kind, engine, train):
    spec = AugmentSpec(size=(40, 48), train=train)
    store, got = batches(stores[kind], augment=spec, engine=engine, num_workers=2, shuffle=train)
    checked = 0
    for images, targets in got:
        assert set(targets) == {"label", "mask"} and targets["mask"].dtype == torch.int64
        assert targets["mask"].shape == (len(images), 40, 48)
        checked += check_on_pixels(images, targets["mask"])
        records = record_ids(store, targets["label"])
        want = planned_masks(store, records, spec, seed=KW["seed"])
        assert np.array_equal(targets["mask"].numpy(), want)
    assert checked > 6 * 40 * 48 / 3   # most of every mask is away from a region's edge
    if not train:   # the evaluation crop keeps the centre: every quadrant is there, no pixel outside
        assert all(set(t["mask"].unique().tolist()) == set(COLOURS) for _, t in got)


@pytest.mark.parametrize("op", [RandAugment(num_ops=3, magnitude=25), TrivialAugmentWide(),
                                TimmRandAugment("rand-m15-n3-mstd0.5")])
@pytest.mark.parametrize("engine", ["threads", "processes"])
def test_masks_follow_every_geometric_op_with_their_images_parameters(stores, op, engine):
    """Each sample's mask under the parameters its image had: the batch without the op, then
    the op's drawn parameters applied to both (image and mask agree op by op: test_transforms_masks)."""
    kw = dict(train=True, size=48, engine=engine, num_workers=2, batch_size=6, shuffle=True)
    store, plain = batches(stores["lmdb"], **kw)
    _, moved = batches(stores["lmdb"], transforms=[op], **kw)
    steps = SampleTransforms([op])
    ignored = 0
    for (images, targets), (got_images, got) in zip(plain, moved, strict=True):
        records = record_ids(store, targets["label"])
        drawn = steps.draw(KW["seed"], 0, records)
        for j, index in enumerate(records):
            image = steps.apply_drawn(images[j].permute(1, 2, 0).numpy().copy(), drawn, j, KW["seed"], 0, index)
            mask = steps.apply_drawn_to_mask(targets["mask"][j].numpy(), drawn, j, IGNORE)
            assert np.array_equal(got_images[j].permute(1, 2, 0).numpy(), image)
            assert np.array_equal(got["mask"][j].numpy(), mask)
            ignored += int((mask == IGNORE).sum())
    assert ignored > 0, "no op brought pixels in from outside the image"


def test_erased_boxes_are_ignore_index(stores):
    store, got = batches(stores["h5"], train=True, size=40, engine="processes", num_workers=2,
                         transforms=[RandomErasing(p=1.0, value=0, scale=(0.1, 0.2))])
    for images, targets in got:
        check_on_pixels(images, targets["mask"])
        ignored = (targets["mask"] == IGNORE).flatten(1).sum(1)
        assert (ignored >= 0.08 * 40 * 40).all()   # each sample's box: a tenth of it at least, all ignored


def test_cutmix_pastes_the_partners_mask_with_its_pixels(stores):
    store, got = batches(stores["lmdb"], train=True, size=40, engine="threads", num_workers=1, batch_size=6,
                         transforms=TransformSpec(batch_transforms=[CutMix(alpha=1.0, num_classes=6, mode="elem")]))
    pasted = 0
    for images, targets in got:
        check_on_pixels(images, targets["mask"])
        assert targets["label"].dtype == torch.float32   # the labels mixed as without masks
        pasted += int((targets["label"].max(1).values < 0.999).sum())
    assert pasted > 0


@pytest.mark.parametrize("mixer", [MixUp(num_classes=6), Mixup(mixup_alpha=0.8, cutmix_alpha=1.0), "MixUp", "Mixup"])
def test_a_blending_mixer_is_refused_in_one_line(stores, mixer):
    with pytest.raises(ValueError) as err:
        FeedLoader(stores["lmdb"], transforms=TransformSpec(batch_transforms=[mixer]), **KW)
    assert "\n" not in str(err.value) and "mask" in str(err.value) and "CutMix" in str(err.value)


def test_a_cutting_timm_mixup_is_taken(stores):
    _, got = batches(stores["lmdb"], train=True, size=32, engine="threads", num_workers=1, batch_size=6,
                     transforms=TransformSpec(batch_transforms=[Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, mode="pair")]))
    for images, targets in got:
        check_on_pixels(images, targets["mask"])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32])
def test_masks_in_the_dtype_asked(stores, dtype):
    _, got = batches(stores["lmdb"], size=32, engine="threads", num_workers=1,
                     output=OutputSpec(mean=None, mask_dtype=dtype))
    assert all(t["mask"].dtype == dtype for _, t in got)
    assert set(torch.cat([t["mask"] for _, t in got]).unique().tolist()) == set(COLOURS)


def test_masks_that_a_dtype_cannot_hold_are_refused_before_anything_starts(tmp_path, stores):
    sixteen, _ = packed(str(tmp_path), scale=1000)
    with pytest.raises(ValueError, match=r"masks as torch.uint8 cannot hold class 4000: ask for a wider"):
        FeedLoader(sixteen, output=OutputSpec(mask_dtype=torch.uint8), **KW)
    with pytest.raises(ValueError, match=r"cannot hold ignore_index=-100"):
        FeedLoader(stores["lmdb"], augment=AugmentSpec(ignore_index=-100), output=OutputSpec(mask_dtype=torch.uint8),
                   **KW)
    with pytest.raises(TypeError, match="mask_dtype must be one of"):
        OutputSpec(mask_dtype=torch.float32)
    with pytest.raises(ValueError, match="ignore_index must be an int"):
        AugmentSpec(ignore_index=2.5)


def test_16_bit_masks_and_a_negative_ignore_index(tmp_path):
    path, _ = packed(str(tmp_path), scale=1000)
    _, got = batches(path, engine="threads", num_workers=1, shuffle=True,
                     augment=AugmentSpec(size=32, train=True, ignore_index=-100),
                     transforms=[RandomErasing(p=1.0, value=0)])
    for images, targets in got:
        erased = targets["mask"] == -100
        assert erased.any() and set(targets["mask"][~erased].unique().tolist()) <= {1000, 2000, 3000, 4000}


def test_a_store_with_masks_alone_yields_the_masks_tensor(tmp_path):
    src, labels, _ = mask_folder(str(tmp_path), n=4, label=False, jsonl=True)
    path = str(tmp_path / "m.h5")
    pack(src, path, labels_csv=labels, progress=False)
    with FeedLoader(path, size=32, engine="threads", num_workers=1, output=PIXELS, **KW) as loader:
        images, masks = next(iter(loader))
    assert isinstance(masks, torch.Tensor) and masks.shape == (3, 32, 32)
    check_on_pixels(images, masks)


def test_a_bad_record_is_replaced_by_its_substitute_with_the_substitutes_own_mask(tmp_path):
    path, _ = packed(str(tmp_path))
    import lmdb
    from feedline.dataset.format import MASK_SUFFIX, image_key
    env = lmdb.open(path, subdir=False, lock=False)
    with env.begin(write=True) as txn:   # record 2's mask changed on disk: its checksum fails
        value = bytearray(txn.get(image_key(2) + MASK_SUFFIX))
        value[-3] ^= 0xFF
        txn.put(image_key(2) + MASK_SUFFIX, bytes(value))
    env.close()
    spec = AugmentSpec(size=(36, 36), train=True)
    for engine in ("threads", "processes"):
        with FeedLoader(path, augment=spec, engine=engine, num_workers=2, on_error="substitute", output=PIXELS,
                        **KW) as loader:
            store = loader.dataset
            rows = [(images, t) for images, t in loader]
            bad = loader.stats.bad_records
        assert [(b.index, "mask" in b.detail) for b in bad] == [(2, True)]
        images, targets = rows[0]   # sequential order: record 2 is row 2 of the first batch
        check_on_pixels(images, targets["mask"])
        sub = bad[0].substitute
        assert record_ids(store, targets["label"])[2] == sub
        from feedline.sources.substitute import substitute_sample
        _, box, flip = substitute_sample(spec, KW["seed"], 0, 2, 0, store.sizes)
        want = np.empty((36, 36), np.int64)
        sample_mask(store.mask(sub), Box(*(int(v) for v in box)), flip, want, IGNORE)
        assert np.array_equal(targets["mask"][2].numpy(), want)


def test_dali_refuses_a_store_with_masks_in_one_line(stores):
    pytest.importorskip("nvidia.dali")
    with pytest.raises(ValueError) as err:
        FeedLoader(stores["lmdb"], engine="dali", batch_size=3, device="cpu")
    assert "\n" not in str(err.value) and "engine='processes'" in str(err.value) and "engine='gpu'" in str(err.value)


@pytest.mark.cuda
def test_masks_on_a_cuda_output_equal_the_host_ones(stores):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    spec = AugmentSpec(size=(40, 48), train=True)
    _, host = batches(stores["lmdb"], augment=spec, engine="processes", num_workers=2,
                      transforms=[RandAugment(num_ops=2, magnitude=20)])
    _, cuda = batches(stores["lmdb"], augment=spec, engine="processes", num_workers=2, device="cuda",
                      output=OutputSpec(mean=None, channels_last=False),
                      transforms=[RandAugment(num_ops=2, magnitude=20)])
    for (_, a), (_, b) in zip(host, cuda, strict=True):
        assert b["mask"].device.type == "cuda" and torch.equal(a["mask"], b["mask"].cpu())


@pytest.mark.cuda
def test_the_gpu_engine_delivers_masks_on_their_pixels(stores):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    spec = AugmentSpec(size=(40, 48), train=True)
    store, got = batches(stores["lmdb"], augment=spec, engine="gpu", num_workers=2, device="cuda",
                         output=OutputSpec(mean=None, channels_last=False), decoder="auto")
    for images, targets in got:
        assert targets["mask"].device.type == "cuda"
        check_on_pixels(images.cpu(), targets["mask"].cpu())
