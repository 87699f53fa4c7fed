"""The trainer's timm-named flags, with timm's meaning and defaults: aliases, --opt (sgd is
Nesterov's; Lamb's update written out), the schedule (warmup from --warmup-lr, never shortened;
cosine to --min-lr and the cooldown; step; multistep), --clip-grad, --amp (a switch) beside
feedline's --autocast, --model-ema (its update written out, validated and resumed), and an
unknown flag's answer: timm's flags that are not here are answered, never guessed at."""
from __future__ import annotations

import argparse
import logging

import pytest
import torch
from test_train_helpers import FAST, events, pack, run, two_class_folder

from feedline.cli import main as cli_main
from feedline.core.flags import add_dataclass_arguments, config_from_args
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


def test_the_defaults_of_timms_flags_are_timms():
    """timm's train.py: --weight-decay 2e-5, --momentum 0.9, --warmup-epochs 5, --warmup-lr 1e-5,
    --min-lr 0, --cooldown-epochs 0, --decay-epochs 90, --decay-milestones 90 180 270,
    --decay-rate 0.1, --color-jitter 0.4, --smoothing 0.1, --amp off, --amp-dtype float16."""
    cfg = parsed([])
    assert (cfg.weight_decay, cfg.momentum, cfg.warmup_epochs, cfg.warmup_lr, cfg.min_lr, cfg.cooldown_epochs) == \
        (2e-5, 0.9, 5.0, 1e-5, 0.0, 0)
    assert (cfg.decay_epochs, cfg.decay_milestones, cfg.decay_rate, cfg.color_jitter) == (90.0, (90, 180, 270), 0.1, 0.4)
    assert (cfg.opt, cfg.sched, cfg.remode, cfg.mixup_mode, cfg.model_ema) == ("sgd", "cosine", "pixel", "batch", False)
    assert cfg.model_ema_decay == 0.9998 and cfg.crop_pct == 0.875 and cfg.label_smoothing == 0.1
    assert (cfg.amp, cfg.amp_dtype, cfg.clip_grad, cfg.clip_mode) == (False, "float16", None, "norm")
    assert parsed(["--decay-milestones", "3", "7", "--dr", "0.5"]).decay_milestones == (3, 7)


def test_amp_is_timms_switch_and_autocast_feedlines_choice(capsys):
    from feedline.train.choices import Autocast
    from feedline.train.config import TrainError
    assert parsed(["--amp"]).precision is Autocast.FP16
    assert parsed(["--amp", "--amp-dtype", "bfloat16"]).precision is Autocast.BF16
    assert parsed([]).precision is Autocast.AUTO and parsed(["--autocast", "off"]).precision is Autocast.OFF
    with pytest.raises(TrainError, match=r"--amp \(timm's, with --amp-dtype\) and --autocast bf16 both choose"):
        parsed(["--amp", "--autocast", "bf16"])
    with pytest.raises(SystemExit):
        cli_main(["train", "data.lmdb", "--amp", "bf16"])
    assert ("bf16: --amp is a switch and takes no value; --amp-dtype float16|bfloat16 chooses its dtype, or "
            "feedline's --autocast bf16|fp16|off without --amp") in capsys.readouterr().err


@pytest.mark.parametrize("typed, meant", [("--smothing", "--smoothing"), ("--wokers", "--workers"),
                                          ("--weight-dacay", "--weight-decay"), ("--model-emma", "--model-ema")])
def test_an_unknown_flag_says_what_was_meant(capsys, typed, meant):
    with pytest.raises(SystemExit) as stop:
        cli_main(["train", "--synthetic", typed])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert f"unrecognized arguments: {typed}; {typed}: did you mean {meant}?" in err
    assert "usage: feedline train" in err  # the trainer's usage, not the top level's


# timm's train.py flags that feedline train takes, with timm's meaning
TIMM_TAKEN = """--model -b --batch-size --num-classes --img-size --crop-pct --channels-last --resume --device --amp
--amp-dtype --opt --momentum --weight-decay --clip-grad --clip-mode --sched --lr --warmup-lr --min-lr --epochs
--decay-milestones --decay-epochs --warmup-epochs --cooldown-epochs --decay-rate --dr --color-jitter --aa --reprob
--remode --mixup --cutmix --mixup-prob --mixup-switch-prob --mixup-mode --smoothing --sync-bn --model-ema
--model-ema-decay --seed -j --workers""".split()


def test_every_flag_of_timms_train_is_taken_or_answered_never_guessed(capsys):
    """Each flag of timm's train.py parses here, or is refused with its own answer: none is met
    with "did you mean" a flag of another meaning (--pin-mem once proposed --no-model-ema)."""
    from feedline.train.timm_flags import ANSWERS, NOT_HERE, OTHERS
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, TrainConfig)
    known = {o for action in parser._actions for o in action.option_strings}
    assert set(TIMM_TAKEN) <= known
    refused = [f for f in ANSWERS if not f.endswith(" VALUE")] + OTHERS
    assert not set(refused) & known and len(refused) == len(set(refused))
    for flag in refused:
        with pytest.raises(SystemExit):
            cli_main(["train", "--synthetic", flag])
        err = capsys.readouterr().err
        assert f"; {flag}: {ANSWERS.get(flag, NOT_HERE)}" in err and "did you mean" not in err, flag
    with pytest.raises(SystemExit):
        cli_main(["train", "--synthetic", "--pin-mem"])
    err = capsys.readouterr().err.splitlines()[-1]   # after the usage
    assert "--pin-mem: FeedLoader pins its batches itself" in err and "--no-model-ema" not in err


def test_a_typo_is_not_matched_to_a_flag_of_the_other_polarity(capsys):
    with pytest.raises(SystemExit):
        cli_main(["train", "--synthetic", "--no-model-emma"])
    assert "did you mean --no-model-ema?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["train", "--synthetic", "--model-emax"])
    assert "did you mean --model-ema?" in capsys.readouterr().err


def test_the_optimizers_by_name_and_lambs_update_written_out():
    """timm's names: sgd is Nesterov's, momentum the classical one, adam and adamw torch's."""
    net = torch.nn.Linear(3, 2)
    sgd, momentum = make_optimizer(net, 0.1, 0.9, 1e-4, "sgd"), make_optimizer(net, 0.1, 0.9, 1e-4, "momentum")
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["nesterov"] and sgd.defaults["momentum"] == 0.9
    assert isinstance(momentum, torch.optim.SGD) and not momentum.defaults["nesterov"]
    assert type(make_optimizer(net, 0.1, 0.9, 1e-4, "adam")) is torch.optim.Adam
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
        pytest.approx([0.0, 0.5, 1.0, 1.0, 0.1, 0.01])


def test_timms_warmup_cosine_cooldown_and_multistep_by_hand():
    """Warmup: warmup_lr + t (peak - warmup_lr) / W (timm's); cosine over the whole run, the
    warmup's steps counted: min + (peak - min) (1 + cos(pi t / T)) / 2; at and after T (the
    cooldown) min_lr; multistep: times the rate at each milestone passed."""
    import math
    cosine = dict(warmup_lr=0.2, min_lr=0.1)
    assert [lr_at(t, 1.0, 4, 100, **cosine) for t in (0, 2, 3)] == pytest.approx([0.2, 0.6, 0.8])
    assert lr_at(4, 1.0, 4, 100, **cosine) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 4 / 100)))
    assert lr_at(50, 1.0, 4, 100, **cosine) == pytest.approx(0.55)
    assert [lr_at(t, 1.0, 4, 100, **cosine) for t in (100, 130)] == [0.1, 0.1]
    multistep = dict(decay_rate=0.5, milestones=(10, 20))
    assert [lr_at(t, 1.0, 0, 100, "multistep", **multistep) for t in (0, 9, 10, 19, 20, 99)] == \
        [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]


def test_gradients_are_clipped_before_the_step_by_norm_or_by_value():
    """One SGD step (lr 1, no momentum) on loss = w . (3, 4): the gradient (3, 4) has norm 5;
    clipped to norm 1 it is (0.6, 0.8), to value 1 it is (1, 1); with a GradScaler the clip
    sees the unscaled gradient."""
    from feedline.train.schedule import WarmupSchedule
    from feedline.train.step import Amp, GradClip, StepRunner

    def stepped(clip, scaler=None):
        net = torch.nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            net.weight.zero_()
        optimizer = make_optimizer(net, 1.0, 0.0, 0.0, "momentum")
        runner = StepRunner(net, None, optimizer, WarmupSchedule(optimizer, 1.0, 0, 10), scaler,
                            lambda out, _: out.sum(), Amp("cpu", None), raw=net, clip=clip)
        runner.micro_step(torch.tensor([[3.0, 4.0]]), None, 1, True)
        return net.weight.detach().flatten().tolist()
    assert stepped(None) == pytest.approx([-3.0, -4.0])
    assert stepped(GradClip(1.0)) == pytest.approx([-0.6, -0.8])
    assert stepped(GradClip(1.0, "value")) == pytest.approx([-1.0, -1.0])
    assert stepped(GradClip(1.0), torch.amp.GradScaler("cpu", init_scale=1024.0)) == pytest.approx([-0.6, -0.8])


def test_checks_of_the_schedule_and_optimizer_flags():
    from feedline.train.config import TrainError
    for argv, message in [(["--cooldown-epochs", "2", "--sched", "step"], "--cooldown-epochs follows a cosine"),
                          (["--decay-milestones", "30", "10"], "--decay-milestones must be increasing"),
                          (["--clip-grad", "0"], "--clip-grad must be positive"),
                          (["--momentum", "0"], "--opt sgd is SGD with Nesterov momentum"),
                          (["--warmup-lr", "-1"], "--warmup-lr must not be negative")]:
        with pytest.raises(TrainError, match=message):
            parsed(argv)
    assert parsed(["--opt", "momentum", "--momentum", "0"]).opt == "momentum"
    assert parsed(["--cooldown-epochs", "2", "--epochs", "3"]).run_epochs == 5


def test_the_ema_update_is_written_out():
    net = torch.nn.BatchNorm1d(2)
    ema = ModelEma(net, 0.9)
    with torch.no_grad():
        net.weight.fill_(3.0)
    net.train()(torch.randn(4, 2))
    ema.update(net)
    assert torch.allclose(ema.module.weight, torch.full((2,), 0.9 * 1.0 + 0.1 * 3.0))
    assert ema.module.num_batches_tracked == 1 and not ema.module.weight.requires_grad


def test_a_run_with_timms_flags_validates_and_resumes_the_ema(tmp_path, caplog, capsys):
    train = pack(two_class_folder(tmp_path / "src", 48, seed=1), tmp_path / "train.lmdb")
    common = [train, "--val", train, *FAST, "--opt", "lamb", "--sched", "step", "--decay-epochs", "1",
              "--model-ema", "--model-ema-decay", "0.5", "--smoothing", "0.1", "--epochs", "2",
              "--warmup-epochs", "0", "--synthetic-steps", "0", "--deterministic"]
    with caplog.at_level(logging.INFO, logger="feedline.train"):
        assert run([*common, "--out", tmp_path / "whole"]) == 0
    epochs = events(tmp_path / "whole", "epoch")
    assert all("ema_top1" in e and "top1" in e for e in epochs)
    assert epochs[1]["lr"] < epochs[0]["lr"]
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch 2/2"))
    assert (f"top-1 {epochs[1]['top1']:.1%}" in line and f"| EMA val loss {epochs[1]['ema_val_loss']:.4f}, "
            f"top-1 {epochs[1]['ema_top1']:.1%}, top-5 {epochs[1]['ema_top5']:.1%}" in line)   # beside the model's
    assert f"EMA val top-1 {epochs[1]['ema_top1']:.1%}" in capsys.readouterr().out   # the run's last words
    assert run([*common, "--out", tmp_path / "parts", "--max-steps", "4"]) == 0
    assert run([*common, "--out", tmp_path / "parts", "--resume"]) == 0
    whole = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=False)
    parts = torch.load(tmp_path / "parts" / "checkpoint.pt", weights_only=False)
    for name, tensor in whole["model_ema"].items():
        assert torch.equal(parts["model_ema"][name], tensor), name
