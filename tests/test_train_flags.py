"""The trainer's timm-named flags: aliases, --opt (Lamb's update written out), --sched step,
--model-ema (its update written out, validated and resumed), an unknown flag's hint, and the
defaults named after the recipe they come from."""
from __future__ import annotations

import argparse

import pytest
import torch
from test_train_helpers import FAST, events, pack, run, two_class_folder

from feedline.cli import main as cli_main
from feedline.flags import add_dataclass_arguments, config_from_args
from feedline.train.config import TrainConfig
from feedline.train.ema import ModelEma
from feedline.train.lamb import Lamb
from feedline.train.schedule import lr_at
from feedline.train.step import make_optimizer


def parsed(argv) -> TrainConfig:
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, TrainConfig)
    return config_from_args(TrainConfig, parser.parse_args(["--synthetic", *argv]))


def test_timms_flag_names_are_aliases_of_feedlines():
    timm = parsed(["--smoothing", "0.2", "--model", "tiny", "-b", "8", "--workers", "2", "--img-size", "64",
                   "--crop-pct", "0.9", "--mixup-mode", "pair", "--remode", "const", "--opt", "adamw",
                   "--sched", "step", "--model-ema", "--model-ema-decay", "0.99"])
    ours = parsed(["--label-smoothing", "0.2", "--arch", "tiny", "--batch-size", "8", "--threads", "2",
                   "--size", "64", "--crop-pct", "0.9", "--mixup-mode", "pair", "--remode", "const",
                   "--opt", "adamw", "--sched", "step", "--model-ema", "--model-ema-decay", "0.99"])
    assert timm == ours and parsed(["-j", "3"]).threads == 3
    assert (ours.label_smoothing, ours.batch_size, ours.size, ours.model_ema_decay) == (0.2, 8, 64, 0.99)


def test_defaults_are_the_torchvision_reference_recipes_and_timms():
    cfg = parsed([])
    assert (cfg.weight_decay, cfg.momentum, cfg.decay_epochs, cfg.decay_rate) == (1e-4, 0.9, 30.0, 0.1)
    assert (cfg.opt, cfg.sched, cfg.remode, cfg.mixup_mode, cfg.model_ema) == ("sgd", "cosine", "pixel", "batch", False)
    assert cfg.model_ema_decay == 0.9998 and cfg.crop_pct == 0.875


@pytest.mark.parametrize("typed, meant", [("--smothing", "--smoothing"), ("--wokers", "--workers"),
                                          ("--weight-dacay", "--weight-decay"), ("--model-emma", "--model-ema")])
def test_an_unknown_flag_says_what_was_meant(capsys, typed, meant):
    with pytest.raises(SystemExit) as stop:
        cli_main(["train", "--synthetic", typed])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert f"unrecognized arguments: {typed}; {typed}: did you mean {meant}?" in err
    assert "usage: feedline train" in err  # the trainer's usage, not the top level's


def test_the_optimizers_by_name_and_lambs_update_written_out():
    net = torch.nn.Linear(3, 2)
    assert isinstance(make_optimizer(net, 0.1, 0.9, 1e-4, "sgd"), torch.optim.SGD)
    assert isinstance(make_optimizer(net, 0.1, 0.9, 1e-4, "adamw"), torch.optim.AdamW)
    w = torch.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    g = torch.tensor([[3.0, 0.0], [-4.0, 0.0]])   # norm 5: clipped to 1.0
    w.grad = g.clone()
    Lamb([w], lr=0.1, weight_decay=0.01).step()
    gc = g / 5.0
    m, v = 0.1 * gc, 0.001 * gc * gc                 # one step of Adam's moments
    u = (m / 0.1) / ((v / 0.001).sqrt() + 1e-6) + 0.01 * torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    w0 = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    want = w0 - 0.1 * (w0.norm() / u.norm()) * u
    assert torch.allclose(w.detach(), want, atol=1e-6)


def test_the_step_schedule_divides_every_decay_steps_after_warmup():
    assert [lr_at(s, 1.0, 2, 100, "step", decay_steps=10, decay_rate=0.1) for s in (0, 1, 2, 9, 10, 25)] == \
        pytest.approx([0.5, 1.0, 1.0, 1.0, 0.1, 0.01])


def test_the_ema_update_is_written_out():
    net = torch.nn.BatchNorm1d(2)
    ema = ModelEma(net, 0.9)
    with torch.no_grad():
        net.weight.fill_(3.0)
    net.train()(torch.randn(4, 2))
    ema.update(net)
    assert torch.allclose(ema.module.weight, torch.full((2,), 0.9 * 1.0 + 0.1 * 3.0))
    assert ema.module.num_batches_tracked == 1 and not ema.module.weight.requires_grad


def test_a_run_with_timms_flags_validates_and_resumes_the_ema(tmp_path):
    train = pack(two_class_folder(tmp_path / "src", 48, seed=1), tmp_path / "train.lmdb")
    common = [train, "--val", train, *FAST, "--opt", "lamb", "--sched", "step", "--decay-epochs", "1",
              "--model-ema", "--model-ema-decay", "0.5", "--smoothing", "0.1", "--epochs", "2",
              "--synthetic-steps", "0", "--deterministic"]
    assert run([*common, "--out", tmp_path / "whole"]) == 0
    epochs = events(tmp_path / "whole", "epoch")
    assert all("ema_top1" in e and "top1" in e for e in epochs)
    assert epochs[1]["lr"] < epochs[0]["lr"]
    assert run([*common, "--out", tmp_path / "parts", "--max-steps", "4"]) == 0
    assert run([*common, "--out", tmp_path / "parts", "--resume"]) == 0
    whole = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=False)
    parts = torch.load(tmp_path / "parts" / "checkpoint.pt", weights_only=False)
    for name, tensor in whole["model_ema"].items():
        assert torch.equal(parts["model_ema"][name], tensor), name
