"""The trainer's recipe flags (timm's names): parsing, the FeedLoader arguments they make,
the soft-target loss, and one short CPU run with the whole recipe on."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_train_helpers import FAST, events, one_line_error, pack, run, summary, two_class_folder
from test_train_helpers import restore_torch_globals  # noqa: F401 -- autouse: torch's globals put back

from feedline.planning.size_schedule import ProgressiveSize
from feedline.planning.augment import AugmentSpec
from feedline.train.config import TrainConfig
from feedline.train.recipe import loader_options
from feedline.train.task import CLASSIFY, FieldLoss
from feedline.train.recipe_options import parse_aa
from feedline.transforms import ColorJitter, Mixup, TimmRandAugment, TimmRandomErasing, TrivialAugmentWide

RECIPE = ["--aa", "rand-m9-mstd0.5-inc1", "--color-jitter", "0.3", "--reprob", "0.25", "--mixup", "0.8", "--cutmix", "1.0",
          "--mixup-switch-prob", "0.5", "--label-smoothing", "0.1"]


@pytest.mark.parametrize("value, parsed", [("rand-m9-n2", ("rand", "rand-m9-n2")), ("rand-m7", ("rand", "rand-m7")),
                                           ("rand-m9-mstd0.5-inc1", ("rand", "rand-m9-mstd0.5-inc1")),
                                           ("trivial", ("trivial", "")), ("none", None), (None, None)])
def test_aa_spellings(value, parsed):
    assert parse_aa(value) == parsed


def test_the_flags_make_the_loader_arguments():
    cfg = TrainConfig(synthetic=True, aa="rand-m9-mstd0.5-inc1", color_jitter=0.3, reprob=0.25, mixup=0.8,
                      cutmix=1.0, mixup_prob=0.9, mixup_switch_prob=0.4, mixup_mode="pair", label_smoothing=0.1,
                      size=64, size_start=32, size_ramp_epochs=4, eval_size=96)
    train = loader_options(cfg, True, 10)
    (ra,) = train["transforms"].transforms   # timm: --color-jitter only without --aa
    assert isinstance(ra, TimmRandAugment) and ra.config.magnitude == 9 and ra.config.increasing
    assert ra.config.magnitude_std == 0.5 and ra.img_mean == (124, 116, 104)  # timm's fill: the mean in pixels
    (jitter,) = loader_options(TrainConfig(synthetic=True, color_jitter=0.3), True, 10)["transforms"].transforms
    assert isinstance(jitter, ColorJitter) and jitter.brightness == pytest.approx((0.7, 1.3)) and jitter.hue is None
    (default,) = loader_options(TrainConfig(synthetic=True), True, 10)["transforms"].transforms   # timm's 0.4
    assert default.saturation == pytest.approx((0.6, 1.4))
    erase, mix = train["transforms"].batch_transforms  # erasing on the normalized batch, then mixing: timm's order
    assert isinstance(erase, TimmRandomErasing) and (erase.probability, erase.mode) == (0.25, "pixel")
    assert isinstance(mix, Mixup) and mix.mode == "pair"
    assert (mix.mixup_alpha, mix.cutmix_alpha, mix.prob, mix.switch_prob) == (0.8, 1.0, 0.9, 0.4)
    assert (mix.label_smoothing, mix.num_classes) == (0.1, 10)
    assert isinstance(train["size"], ProgressiveSize) and [train["size"].size(e) for e in (0, 4)] == [32, 64]
    assert loader_options(cfg, False, 10) == {"augment": AugmentSpec(size=96, train=False, crop_fraction=0.875)}
    plain = loader_options(TrainConfig(synthetic=True, aa="trivial"), True, 10)
    assert isinstance(plain["transforms"].transforms[0], TrivialAugmentWide) and plain["transforms"].batch_transforms == ()


@pytest.mark.parametrize("argv, message", [
    (["--aa", "augmix-m5-w4-d2"], "--aa 'augmix-m5-w4-d2': timm's AugMix is not supported"),
    (["--aa", "rand-m9-x2"], "--aa 'rand-m9-x2': cannot read 'x2'; expected rand-mM-nN"),
    (["--remode", "noise"], "--remode must be pixel, rand or const"),
    (["--mixup-mode", "pairs"], "--mixup-mode must be batch, pair or elem"),
    (["--reprob", "1.5"], r"--reprob is a probability: it must be in \[0, 1\], got 1.5"),
    (["--mixup", "-1"], "--mixup must not be negative"),
    (["--size-start", "32"], "--size-start needs --size-ramp-epochs"),
])
def test_bad_recipe_flags_are_one_line(tmp_path, capsys, argv, message):
    line = one_line_error(capsys, ["--synthetic", *argv, "--out", tmp_path])
    assert pytest.importorskip("re").search(message, line), line


def test_soft_target_loss_is_timms_and_hard_labels_keep_smoothing():
    """The run's classification loss: mixed targets, already smoothed by the mixer, are not
    smoothed again (torch's cross_entropy would smooth probability targets too)."""
    logits = torch.randn(4, 5)
    soft = torch.softmax(torch.randn(4, 5), 1)
    loss = FieldLoss(CLASSIFY, "label", label_smoothing=0.1)
    assert torch.allclose(loss(logits, soft), (-soft * F.log_softmax(logits, 1)).sum(1).mean())
    assert torch.allclose(loss(logits, {"label": soft}, reduction="sum"), (-soft * F.log_softmax(logits, 1)).sum())
    labels = torch.tensor([0, 1, 2, 3])
    assert torch.allclose(loss(logits, labels), F.cross_entropy(logits, labels, label_smoothing=0.1))


def test_a_short_cpu_run_with_the_recipe(tmp_path):
    train = pack(two_class_folder(tmp_path / "src", 48, seed=1), tmp_path / "train.lmdb")
    val = pack(two_class_folder(tmp_path / "val_src", 8, seed=2), tmp_path / "val.h5")
    out = tmp_path / "run"
    rc = run([train, "--val", val, *FAST, *RECIPE, "--size", "40", "--size-start", "24", "--size-ramp-epochs", "2",
              "--eval-size", "48", "--epochs", "3", "--synthetic-steps", "0", "--out", out])
    assert rc == 0
    epochs = events(out, "epoch")
    assert len(epochs) == 3 and all(e["train_loss"] == e["train_loss"] for e in epochs)   # finite
    assert summary(out)["final"]["val_images"] == 16


def test_resume_with_the_recipe_equals_an_uninterrupted_run(tmp_path):
    """Every part of the recipe is a function of (seed, epoch, index): stopping mid-epoch 2
    (at a new size of the ramp) and resuming gives the uninterrupted run's weights, bitwise."""
    train = pack(two_class_folder(tmp_path / "src", 48, seed=1), tmp_path / "train.lmdb")
    common = [train, *FAST, *RECIPE, "--size", "40", "--size-start", "24", "--size-ramp-epochs", "1",
              "--epochs", "2", "--deterministic", "--synthetic-steps", "0"]
    assert run([*common, "--out", tmp_path / "whole"]) == 0
    assert run([*common, "--out", tmp_path / "parts", "--max-steps", "9"]) == 0   # 6 steps per epoch
    assert run([*common, "--out", tmp_path / "parts", "--resume"]) == 0
    whole = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=False)
    parts = torch.load(tmp_path / "parts" / "checkpoint.pt", weights_only=False)
    assert parts["progress"] == whole["progress"]
    for name, tensor in whole["model"].items():
        assert torch.equal(parts["model"][name], tensor), name


def test_resume_refuses_another_recipe(tmp_path, capsys):
    train = pack(two_class_folder(tmp_path / "src", 48, seed=1), tmp_path / "train.lmdb")
    common = [train, *FAST, "--epochs", "2", "--synthetic-steps", "0", "--out", tmp_path / "run"]
    assert run([*common, "--max-steps", "2"]) == 0
    line = one_line_error(capsys, [*common, "--resume", "--mixup", "0.8"])
    assert "was written with --mixup 0.0, this run has 0.8" in line
