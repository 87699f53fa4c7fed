"""The runners an engine calls: the per-sample path (decode threads, numpy/OpenCV) and the
batched path (torch, any device) give the same images from the same parameters; user hooks
get a seeded Generator; bad transforms and bad hook results give errors that name them."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import oracles_transforms as oracle
from feedline.transforms import (BatchTransforms, ColorJitter, GaussianBlur, MixUp, RandAugment,
                                 RandomErasing, RandomGrayscale, SampleTransforms, TransformError,
                                 TrivialAugmentWide)

PHOTOS = [oracle.photo(i, 64, 80) for i in range(6)]


def recipe():
    return [RandAugment(2, 9), TrivialAugmentWide(), ColorJitter(0.4, 0.4, 0.4, 0.1),
            RandomGrayscale(0.2), GaussianBlur(5), RandomErasing(0.5, value=(0, 128, 255))]


def host_and_device(ops: SampleTransforms, device: str, seed=4, epoch=2, first=100):
    n = 24
    indices = np.arange(first, first + n)
    imgs = [PHOTOS[i % len(PHOTOS)] for i in range(n)]
    host = np.stack([ops.apply(img, seed, epoch, int(i)) for img, i in zip(imgs, indices)])
    x = torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).to(device)
    dev = ops.apply_batch(x, seed, epoch, indices).permute(0, 2, 3, 1).cpu().numpy()
    return np.stack(imgs), host, dev


def check_agreement(device: str):
    ops = SampleTransforms(recipe())
    imgs, host, dev = host_and_device(ops, device)
    mad = np.abs(host.astype(np.float64) - dev).mean(axis=(1, 2, 3))
    assert dev.dtype == np.uint8
    assert mad.max() <= 1.0, mad  # within 1/255 per sample
    assert np.abs(host.astype(np.float64) - imgs).mean() > 20  # the recipe changed the images


def test_per_sample_and_batched_paths_agree_on_cpu():
    check_agreement("cpu")


@pytest.mark.cuda
def test_per_sample_and_batched_paths_agree_on_the_gpu():
    check_agreement("cuda")


def test_every_op_alone_agrees_between_paths():
    for op in recipe():
        _, host, dev = host_and_device(SampleTransforms([op]), "cpu", first=7)
        assert np.abs(host.astype(np.float64) - dev).mean(axis=(1, 2, 3)).max() <= 1.0, op


def test_the_batched_path_is_the_same_for_any_batch_split():
    ops = SampleTransforms(recipe())
    x = torch.from_numpy(np.stack(PHOTOS)).permute(0, 3, 1, 2)
    idx = np.arange(50, 56)
    whole = ops.apply_batch(x.clone(), 1, 0, idx)
    halves = torch.cat([ops.apply_batch(x[:2].clone(), 1, 0, idx[:2]),
                        ops.apply_batch(x[2:].clone(), 1, 0, idx[2:])])
    assert torch.equal(whole, halves)


def test_float_batches_in_0_1_give_the_uint8_result_scaled():
    ops = SampleTransforms(recipe())
    x = torch.from_numpy(np.stack(PHOTOS)).permute(0, 3, 1, 2)
    as_u8 = ops.apply_batch(x, 3, 0, np.arange(6))
    as_float = ops.apply_batch(x.float() / 255, 3, 0, np.arange(6))
    assert as_float.dtype == torch.float32
    assert torch.equal((as_float * 255).round().to(torch.uint8), as_u8)


def test_a_hook_gets_the_sample_and_a_generator_seeded_from_seed_epoch_index():
    seen = []

    def jitter(image, rng):
        seen.append((image.dtype, image.shape, rng.random()))
        return np.clip(image.astype(np.int16) + int(rng.integers(-20, 20)), 0, 255).astype(np.uint8)

    ops = SampleTransforms([RandAugment(), jitter])
    a = ops.apply(PHOTOS[0], 1, 0, 5)
    b = ops.apply(PHOTOS[0], 1, 0, 5)
    c = ops.apply(PHOTOS[0], 1, 0, 6)
    assert np.array_equal(a, b) and seen[0] == seen[1] and seen[2][2] != seen[0][2]
    assert seen[0][:2] == (np.uint8, PHOTOS[0].shape)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("bad,got", [
    (lambda im, rng: im.astype(np.float32), "float32 array"),
    (lambda im, rng: im[:10], "uint8 array of shape (10, 80, 3)"),
    (lambda im, rng: None, "NoneType")])
def test_a_hook_returning_the_wrong_thing_is_named_with_the_sample(bad, got):
    ops = SampleTransforms([ColorJitter(0.2), bad])
    with pytest.raises(TransformError, match=rf"transforms\[1\] \(.*\) returned a {re.escape(got)}.* for sample 17; "
                                             r"it must return a uint8 array of shape \(64, 80, 3\)"):
        ops.apply(PHOTOS[0], 0, 0, 17)


def test_split_keeps_the_order_and_the_streams():
    def hook(image, rng):
        return image

    ops = SampleTransforms([RandAugment(), hook, ColorJitter(0.3), RandomErasing(1.0)])
    host, device = ops.split()
    assert type(host.steps[0]).__name__ == "RandAugment" and host.steps[1] is hook
    assert [type(s).__name__ for s in device.steps] == ["ColorJitter", "RandomErasing"]
    assert np.array_equal(device.draw(1, 0, [3])[0]["factors"], ops.draw(1, 0, [3])[2]["factors"],
                          equal_nan=True)
    with pytest.raises(TransformError, match=r"transforms\[1\] is a callable"):
        ops.apply_batch(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), 0, 0, [0])
    assert SampleTransforms([hook]).split()[1].steps == []


def test_names_resolve_to_the_defaults_and_unknown_names_say_what_is_known():
    ops = SampleTransforms(["RandAugment", "RandomErasing"])
    assert ops.steps[0].num_ops == 2 and ops.steps[1].p == 0.5
    with pytest.raises(TransformError, match=r"transforms\[1\]: unknown op 'RandAugmnet'; known: RandAugment"):
        SampleTransforms(["RandAugment", "RandAugmnet"])
    with pytest.raises(TransformError, match=r"transforms\[0\]: unknown op 'MixUp'; MixUp belongs in batch_transforms"):
        SampleTransforms(["MixUp"])
    with pytest.raises(TransformError, match=r"transforms\[0\]: MixUp belongs in batch_transforms"):
        SampleTransforms([MixUp(1.0)])
    with pytest.raises(TransformError, match=r"batch_transforms\[0\]: RandAugment is per sample"):
        BatchTransforms([RandAugment()])
    with pytest.raises(TransformError, match=r"transforms\[0\]: expected a transform or a callable, got int"):
        SampleTransforms([3])


@pytest.mark.parametrize("make,match", [
    (lambda: RandomGrayscale(1.5), r"RandomGrayscale: p must be a probability between 0 and 1, got 1.5"),
    (lambda: RandomErasing(p=-0.1), r"RandomErasing: p must be a probability"),
    (lambda: RandomErasing(scale=(0.5, 0.1)), r"RandomErasing: scale must satisfy"),
    (lambda: RandomErasing(value="noise"), r"RandomErasing: value must be one number or three"),
    (lambda: RandAugment(magnitude=31), r"RandAugment: magnitude must be an int in 0..30"),
    (lambda: RandAugment(fill=300), r"RandAugment: fill must be"),
    (lambda: GaussianBlur(4), r"GaussianBlur: kernel_size must be an odd positive int"),
    (lambda: GaussianBlur(3, sigma=0), r"GaussianBlur: sigma must be > 0"),
    (lambda: ColorJitter(hue=0.7), r"ColorJitter: hue must lie in"),
    (lambda: ColorJitter(brightness=-1), r"ColorJitter: brightness must be >= 0")])
def test_bad_arguments_name_the_argument(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_a_batch_hook_gets_images_and_targets_and_must_return_both():
    calls = []

    def hook(images, targets):
        calls.append((images.shape, targets.tolist()))
        return images.flip(3), targets

    x = torch.from_numpy(np.stack(PHOTOS)).permute(0, 3, 1, 2)
    y = torch.arange(6)
    images, targets = BatchTransforms([MixUp(1.0), hook], num_classes=6).apply(x, y, 0, 0, np.arange(6))
    assert calls[0][0] == x.shape and targets.shape == (6, 6)
    with pytest.raises(TransformError, match=r"batch_transforms\[0\] \(.*\) must return \(images, targets\)"):
        BatchTransforms([lambda images, targets: images]).apply(x, y, 0, 0, np.arange(6))


def test_the_host_path_gives_the_same_samples_for_any_thread_count_and_batch_draw():
    from concurrent.futures import ThreadPoolExecutor

    def hook(image, rng):
        return np.roll(image, int(rng.integers(0, 5)), axis=1)

    ops = SampleTransforms(recipe() + [hook])
    indices = list(range(300, 324))
    imgs = [PHOTOS[i % len(PHOTOS)] for i in indices]
    one = [ops.apply(img, 8, 1, i) for img, i in zip(imgs, indices)]
    with ThreadPoolExecutor(4) as pool:
        many = list(pool.map(lambda args: ops.apply(args[0], 8, 1, args[1]), zip(imgs, indices)))
    drawn = ops.draw(8, 1, indices)  # as an engine does: one draw per batch, then per sample
    batch = [ops.apply_drawn(img, drawn, k, 8, 1, i) for k, (img, i) in enumerate(zip(imgs, indices))]
    for a, b, c in zip(one, many, batch):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_an_error_inside_a_hook_says_which_hook_and_sample():
    def broken(image, rng):
        raise KeyError("no such thing")

    with pytest.raises(KeyError) as info:
        SampleTransforms([RandomGrayscale(0.5), broken]).apply(PHOTOS[0], 0, 0, 41)
    assert "in transforms[1] (test_an_error_inside_a_hook_says_which_hook_and_sample.<locals>.broken) " \
           "on sample 41" in info.value.__notes__


def test_mixers_mix_the_label_entry_of_dict_targets_and_refuse_boxes():
    import numpy as np
    import pytest
    import torch

    from feedline.transforms import BatchTransforms, MixUp, TransformError
    images = torch.rand(4, 3, 8, 8)
    chain = BatchTransforms([MixUp(1.0)], num_classes=3)
    labels = torch.tensor([0, 1, 2, 1])
    _, plain = chain.apply(images, labels, 1, 0, np.arange(4))
    _, mixed = chain.apply(images, {"label": labels, "path": ["a", "b", "c", "d"]}, 1, 0, np.arange(4))
    assert torch.equal(mixed["label"], plain) and mixed["path"] == ["a", "b", "c", "d"]
    multi = torch.tensor([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.uint8)
    _, soft = chain.apply(images, {"labels": multi}, 1, 0, np.arange(4))
    assert soft["labels"].dtype == torch.float32 and soft["labels"].shape == (4, 3)
    with pytest.raises(TransformError, match=r"batch_transforms\[0\] \(MixUp\): the targets have boxes"):
        chain.apply(images, {"label": labels, "boxes": [None] * 4}, 1, 0, np.arange(4))
    with pytest.raises(TransformError, match="needs a 'label'"):
        chain.apply(images, {"path": ["a"] * 4}, 1, 0, np.arange(4))
