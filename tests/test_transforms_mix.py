"""timm's Mixup against timm 1.0.31's formulas, torchvision's MixUp / CutMix against
torchvision 0.29's, written out in oracles_transforms, on a batch of real photos."""
from __future__ import annotations
import numpy as np
import pytest
import torch
import oracles_transforms as oracle
from feedline.transforms import BatchTransforms, CutMix, Mixup, MixUp, mix, mix_rows

PHOTOS = np.stack([oracle.photo(i, 40, 56) for i in range(5)])
LABELS = torch.tensor([3, 0, 7, 3, 9])


def batch(dtype=torch.float32) -> torch.Tensor:
    x = torch.from_numpy(PHOTOS).permute(0, 3, 1, 2)
    return x.to(dtype) / 255 if dtype.is_floating_point else x.to(dtype)


def reference(mixer, params, smoothing: float, x: np.ndarray, target=None):
    boxes = [tuple(b) if c else None for b, c in zip(params["boxes"].tolist(), params["cutmix"])]
    partner = oracle.rolled if isinstance(mixer, (MixUp, CutMix)) else None
    return (oracle.mix_elem(x, list(params["lam"]), boxes, partner),
            oracle.mixup_target(target or LABELS.tolist(), 10, list(params["lam"]), smoothing, partner))


@pytest.mark.parametrize("mixer", [MixUp(0.4, num_classes=10), CutMix(1.0, num_classes=10),
                                   Mixup(0.8, 1.0, label_smoothing=0.1, num_classes=10),
                                   Mixup(0.8, 1.0, mode="elem", switch_prob=0.5, num_classes=10),
                                   Mixup(0.8, 1.0, mode="pair", switch_prob=0.5, num_classes=10)])
def test_mixed_images_and_targets_follow_timm_and_torchvision(mixer):
    x = batch()
    checked = set()
    for first in range(0, 40, 5):
        params = mixer.draw(2, 0, np.arange(first, first + 5), 40, 56)
        images, targets = mixer.apply(x.clone(), LABELS, params)
        want_x, want_y = reference(mixer, params, mixer.label_smoothing, x.numpy())
        assert np.allclose(images.numpy(), want_x, atol=1e-6)
        assert np.allclose(targets.numpy(), want_y, atol=1e-6)
        assert np.allclose(targets.sum(1).numpy(), 1.0, atol=1e-6)
        checked.update("cut" if c else ("mix" if lam < 1 else "none")
                       for c, lam in zip(params["cutmix"], params["lam"]))
    assert checked >= ({"mix"} if isinstance(mixer, MixUp) else {"cut"} if isinstance(mixer, CutMix)
                       else {"mix", "cut"})


@pytest.mark.parametrize("mixer", [Mixup(0.8, 1.0, num_classes=10), Mixup(0.8, 1.0, mode="elem", num_classes=10),
                                   Mixup(0.8, 1.0, mode="pair", num_classes=10), MixUp(0.4, num_classes=10),
                                   CutMix(1.0, num_classes=10)])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("large", [False, True], ids=["whole-batch", "rows"])
def test_mixing_is_timms_and_torchvisions_arithmetic_bit_for_bit(mixer, layout, large):
    """The batched blends, boxes and target mixes give the very floats of timm's and
    torchvision's own statements, in either memory layout, batch after batch (every batch of
    a mode draws another mix of blends, boxes and untouched samples): a small batch mixed
    whole, a large CPU batch a pair of rows at a time (mix_rows)."""
    n, h, w = (9, 224, 224) if large else (5, 40, 56)
    x = torch.from_numpy(np.stack([oracle.photo(i, h, w) for i in range(n)])).permute(0, 3, 1, 2) / 255
    x = (x - 0.45) / 0.22   # normalized, as the loader hands it over: negative values too
    labels = torch.arange(n) * 7 % 10
    soft = mix.soft_targets(labels, 10, mixer.label_smoothing, "test")
    assert mix_rows.fits(x) == large
    checked = set()
    for first in range(0, 60 if not large else 45, n):
        params = mixer.draw(3, 0, np.arange(first, first + n), h, w)
        images, targets = mixer.apply(x.clone().contiguous(memory_format=layout), labels, params)
        boxes = [tuple(b) if c else None for b, c in zip(params["boxes"].tolist(), params["cutmix"])]
        if isinstance(mixer, (MixUp, CutMix)):
            want_x, want_y = oracle.torchvision_mix(x, soft, params["lam"][0], boxes[0])
        else:
            want_x, want_y = oracle.timm_mix(x, soft, params["lam"], boxes, mixer.mode)
        assert torch.equal(images, want_x) and torch.equal(targets, want_y)
        assert images.is_contiguous(memory_format=layout)
        checked.update("cut" if b else ("mix" if lam < 1 else "none") for b, lam in zip(boxes, params["lam"]))
    assert checked >= ({"mix"} if isinstance(mixer, MixUp) else {"cut"} if isinstance(mixer, CutMix)
                       else {"mix", "cut"})


def test_cutmix_box_and_corrected_lambda_are_timms_and_torchvisions():
    odd_cuts = 0
    for mixer, box_of in ((Mixup(0.0, 1.0, num_classes=10, mode="elem"), oracle.rand_bbox),
                          (CutMix(1.0, num_classes=10, mode="elem"), oracle.torchvision_cutmix_box)):
        params = mixer.draw(9, 1, np.arange(200), 41, 57)
        for beta, (cy, cx), box, lam in zip(params["beta"], params["center"], params["boxes"], params["lam"]):
            want_box, want_lam = box_of(41, 57, beta, cy, cx)
            assert tuple(box) == want_box and lam == pytest.approx(want_lam)
            odd_cuts += int(41 * np.sqrt(1 - beta)) % 2
    assert odd_cuts > 50  # the odd cut sizes, where timm 1.0.31 rounds the upper edge up, are checked
    uncorrected = Mixup(0.0, 1.0, correct_lam=False, num_classes=10).draw(9, 1, [0, 1], 40, 56)
    assert np.array_equal(uncorrected["lam"], uncorrected["beta"])


def test_label_smoothing_off_and_on_values():
    _, targets = Mixup(1.0, prob=0.0, label_smoothing=0.1, num_classes=10)(
        batch(), LABELS, seed=0, epoch=0, indices=np.arange(5))
    assert targets[0, 3] == pytest.approx(1 - 0.1 + 0.01) and targets[0, 0] == pytest.approx(0.01)
    assert targets.dtype == torch.float32 and targets.shape == (5, 10)


def test_uint8_images_stay_uint8_and_rounded():
    mixer = MixUp(1.0, num_classes=10)
    params = mixer.draw(4, 0, np.arange(5), 40, 56)
    as_float, _ = mixer.apply(batch(torch.float32) * 255, LABELS, params)
    as_u8, _ = mixer.apply(batch(torch.uint8), LABELS, params)
    assert as_u8.dtype == torch.uint8
    assert torch.equal(as_u8, as_float.round().to(torch.uint8))


def test_probability_targets_mix_again():
    first, second = MixUp(1.0, num_classes=10), CutMix(1.0, num_classes=10)
    chain = BatchTransforms([first, second])
    images, targets = chain.apply(batch(), LABELS, seed=1, epoch=0, indices=np.arange(5))
    assert targets.shape == (5, 10) and torch.allclose(targets.sum(1), torch.ones(5))


def test_mixers_without_num_classes_say_so_or_take_the_stores():
    with pytest.raises(ValueError, match=r"MixUp.*num_classes is required"):
        MixUp(1.0)(batch(), LABELS, seed=0, epoch=0, indices=np.arange(5))
    images, targets = BatchTransforms([MixUp(1.0)], num_classes=10).apply(
        batch(), LABELS, seed=0, epoch=0, indices=np.arange(5))
    assert targets.shape == (5, 10)
    with pytest.raises(ValueError, match=r"outside 0..7 \(num_classes=8\)"):
        MixUp(1.0, num_classes=8)(batch(), LABELS, seed=0, epoch=0, indices=np.arange(5))


@pytest.mark.parametrize("kwargs,match", [
    (dict(prob=1.5), "prob must be a probability"), (dict(switch_prob=-0.1), "switch_prob"),
    (dict(label_smoothing=2), "label_smoothing"), (dict(mixup_alpha=-1), "mixup_alpha"),
    (dict(mixup_alpha=0, cutmix_alpha=0), "mixup_alpha or cutmix_alpha"), (dict(mode="pairs"), "mode"),
    (dict(num_classes=0), "num_classes")])
def test_bad_mixer_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Mixup(**kwargs)


def test_mixer_lambda_follows_beta_and_the_switch_and_mix_probabilities():
    mixer = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.7, switch_prob=0.4, num_classes=10)
    draws = [mixer.draw(5, 0, [i, i + 1], 64, 64) for i in range(0, 8000, 2)]
    beta = np.array([d["beta"][0] for d in draws])
    cut = np.array([d["cutmix"][0] for d in draws])
    mixed = beta < 1
    assert abs(mixed.mean() - 0.7) < 0.03
    assert abs(cut[mixed].mean() - 0.4) < 0.03
    mix_only = beta[mixed & ~cut]
    assert abs(mix_only.mean() - 0.5) < 0.02
    assert abs(mix_only.var() - 1 / (4 * (2 * 0.8 + 1))) < 0.01  # Var Beta(a, a) = 1 / (4 (2a + 1))
    assert all((d["lam"] == d["lam"][0]).all() for d in draws)  # mode "batch": one per batch


def test_elem_mode_draws_one_lambda_per_sample():
    p = MixUp(0.5, num_classes=3, mode="elem").draw(1, 0, np.arange(64), 32, 32)
    assert len(np.unique(p["lam"])) == 64


def test_mixer_draws_depend_on_the_batchs_first_index_only():
    mixer = CutMix(1.0, num_classes=5)
    a = mixer.draw(3, 1, [40, 41, 42, 43], 32, 32)
    b = mixer.draw(3, 1, [40, 7, 8, 9], 32, 32)
    assert np.array_equal(a["beta"], b["beta"]) and np.array_equal(a["boxes"], b["boxes"])
    c = mixer.draw(3, 1, [44, 45, 46, 47], 32, 32)
    assert c["beta"][0] != a["beta"][0]


def test_torchvision_mixers_pair_each_sample_with_the_one_before():
    x = batch()
    params = MixUp(1.0, num_classes=10).draw(3, 0, np.arange(5), 40, 56)
    images, targets = MixUp(1.0, num_classes=10).apply(x.clone(), LABELS, params)
    lam = float(params["lam"][0])
    # torchvision: inpt.roll(1, 0).mul_(1 - lam).add_(inpt.mul(lam)); labels the same way
    assert torch.allclose(images, x.roll(1, 0) * (1 - lam) + x * lam, atol=1e-6)
    one_hot = torch.nn.functional.one_hot(LABELS, 10).float()
    assert torch.allclose(targets, one_hot.roll(1, 0) * (1 - lam) + one_hot * lam, atol=1e-6)


def test_pair_mode_shares_each_pairs_draw_and_leaves_an_odd_middle_alone():
    params = Mixup(1.0, 1.0, mode="pair", num_classes=10).draw(5, 0, np.arange(7), 40, 56)
    for key in ("lam", "cutmix", "boxes"):
        assert np.array_equal(params[key][:3], params[key][4:][::-1])
    assert params["lam"][3] == 1.0 and not params["cutmix"][3]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.int64])
def test_multi_hot_targets_are_smoothed_toward_one_half_as_timms_multi_label(dtype):
    multi_hot = [[1, 0, 0, 1, 0, 0, 0, 0, 0, 1], [0] * 10, [1] * 10, [0, 1] * 5, [1, 1] + [0] * 8]
    mixer = Mixup(0.8, 1.0, label_smoothing=0.1, num_classes=10)
    params = mixer.draw(2, 0, np.arange(5), 40, 56)
    _, targets = mixer.apply(batch(), torch.tensor(multi_hot).to(dtype), params)
    _, want = reference(mixer, params, 0.1, batch().numpy(), multi_hot)
    assert np.allclose(targets.numpy(), want, atol=1e-6)
    explicit = Mixup(0.8, 1.0, label_smoothing=0.1, num_classes=10, multi_label=True)
    _, from_float = explicit.apply(batch(), torch.tensor(multi_hot, dtype=torch.float32), params)
    assert np.allclose(from_float.numpy(), want, atol=1e-6)


def test_the_loaders_multi_hot_labels_entry_is_smoothed_as_multi_label():
    multi_hot = torch.tensor([[1, 0, 0, 1, 0, 0, 0, 0, 0, 1]] * 5, dtype=torch.float32)  # the loader's float32
    chain = BatchTransforms([Mixup(1.0, prob=0.0, label_smoothing=0.1, num_classes=10)])
    _, targets = chain.apply(batch(), {"labels": multi_hot}, 0, 0, np.arange(5))
    assert torch.allclose(targets["labels"], multi_hot * 0.9 + 0.05)
