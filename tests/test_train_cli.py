"""The trainer's command line: generated from TrainConfig, light to build, one default per
help line, Enums that take their strings, and log lines in a file as in a terminal."""
from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from enum import Enum

import pytest
from test_train_helpers import FAST, REPO, events, pack, subprocess_env, two_class_folder

from feedline.core.choices import Choice, Engine, OnError, Order
from feedline.core.flags import add_dataclass_arguments, config_from_args
from feedline.train import TrainConfig, TrainError
from feedline.train.choices import Arch, Autocast, parse_device
from feedline.train.command import add_arguments
from feedline.train.config import option


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t")
    add_arguments(parser)
    return parser


def _options(parser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


# -- generated from the dataclass ------------------------------------------------------

def test_every_field_is_a_flag_with_its_default(tmp_path):
    parsed = config_from_args(TrainConfig, _parser().parse_args([str(tmp_path)]))
    assert parsed == TrainConfig(train=str(tmp_path))
    dests = {a.dest for a in _options(_parser())}
    assert dests == {f.name for f in dataclasses.fields(TrainConfig)}


def test_flags_reach_the_config(tmp_path):
    args = _parser().parse_args([str(tmp_path), "--arch", "tiny", "--batch-size", "12", "--no-channels-last",
                                 "--on-error", "raise", "--order", "quasi-random", "--resume", "--lr", "0.5",
                                 "--timeout", "7.5", "--device", "cpu", "--progress"])
    cfg = config_from_args(TrainConfig, args)
    assert (cfg.arch, cfg.batch_size, cfg.channels_last) == (Arch.TINY, 12, False)
    assert (cfg.on_error, cfg.order, cfg.resume) == (OnError.RAISE, Order.QUASI_RANDOM, "auto")
    assert (cfg.lr, cfg.timeout, cfg.device, cfg.progress) == (0.5, 7.5, "cpu", True)


def test_each_help_line_states_one_default():
    for action in _options(_parser()):
        shown = action.help.count("(default:")
        if action.default is None and action.dest not in ("progress", "lr", "num_classes"):
            assert shown == 0, action.dest  # the help says what None means
        else:
            assert shown == 1, (action.dest, action.help)
    help_text = _parser().format_help()
    progress = re.search(r"--progress, --no-progress\s+(.*?)\n  --", help_text, re.S)[1]
    assert " ".join(progress.split()) == "a progress bar besides the log lines (default: when stderr is a terminal)"
    on_error = re.search(r"--on-error raise\|substitute\s+(.*?)\n  --", help_text, re.S)[1]
    on_error = " ".join(on_error.split())
    assert "own default is raise" in on_error and on_error.endswith("(default: substitute)")


class Colour(Choice):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Options:
    path: str = option("x", "where", positional=True, nargs="?")
    colour: Colour = option(Colour.RED, "which colour", "looks")
    fast: bool = option(False, "go fast", "speed")
    count: int | None = option(None, "how many", "speed", metavar="N")
    share: float = option(0.5, "a 50% share", "speed")

    def __post_init__(self):
        self.colour = Colour.parse(self.colour, "--colour")


def test_the_generator_on_a_small_dataclass():
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, Options)
    assert config_from_args(Options, parser.parse_args([])) == Options()
    got = config_from_args(Options, parser.parse_args(["y", "--colour", "BLUE", "--fast", "--count", "3"]))
    assert got == Options("y", Colour.BLUE, True, 3, 0.5) and got.colour is Colour.BLUE
    text = parser.format_help()
    assert "--colour red|blue" in text and "--fast, --no-fast" in text and "--count N" in text
    assert "a 50% share (default: 0.5)" in " ".join(text.split())
    assert [g.title for g in parser._action_groups][-2:] == ["looks", "speed"]


# -- Enums that take strings -----------------------------------------------------------

def test_choices_are_enums_that_accept_their_strings(tmp_path):
    cfg = TrainConfig(train=str(tmp_path), arch="TINY", autocast="bf16", decoder="pil", on_error="raise",
                      order="quasi-random")
    assert cfg.arch is Arch.TINY and cfg.autocast is Autocast.BF16 and (cfg.engine, cfg.decoder) == (Engine.AUTO, "pil")
    assert cfg.on_error is OnError.RAISE and cfg.order is Order.QUASI_RANDOM
    assert cfg.arch == "tiny"  # still a string
    plain = cfg.to_dict()
    assert plain["arch"] == "tiny" and type(plain["arch"]) is str and not any(
        isinstance(v, Enum) for v in plain.values())
    assert TrainConfig(train=str(tmp_path)).on_error is OnError.SUBSTITUTE  # the trainer's default


@pytest.mark.parametrize("field, value, allowed", [
    ("arch", "vgg16", "'resnet18', 'resnet50', 'tiny'"), ("autocast", "fp8", "'auto', 'bf16', 'fp16', 'off'"),
    ("amp_dtype", "half", "'float16', 'bfloat16'"),
    ("on_error", "skip", "'raise', 'substitute'"), ("order", "shuffled", "'sequential', 'random', 'quasi-random', 'shards'")])
def test_a_bad_choice_names_the_flag_and_the_allowed_values(tmp_path, field, value, allowed):
    with pytest.raises(TrainError) as err:
        TrainConfig(train=str(tmp_path), **{field: value})
    assert str(err.value) == f"--{field.replace('_', '-')} must be one of {allowed}, got {value!r}"


def test_engine_and_decoder_are_checked_by_name(tmp_path):
    """--engine picks who makes batches, --decoder the threads engine's codec; the old
    --decoder dali / gpu still means the engine."""
    assert TrainConfig(train=str(tmp_path), engine="threads", decoder="simplejpeg").engine is Engine.THREADS
    with pytest.warns(DeprecationWarning, match="pass engine='dali'"):
        old = TrainConfig(train=str(tmp_path), decoder="dali")
    assert (old.engine, old.decoder) == (Engine.DALI, "auto")
    with pytest.raises(TrainError, match=r"^--engine/--decoder: unknown decoder 'libjpeg'; known decoders: auto, "):
        TrainConfig(train=str(tmp_path), decoder="libjpeg")
    with pytest.raises(TrainError, match="engine='gpu' decodes in its own pipeline, so decoder='pil' has no effect"):
        TrainConfig(train=str(tmp_path), engine="gpu", decoder="pil")
    with pytest.raises(TrainError, match="--engine must be one of 'auto', 'threads', 'processes', 'dali', 'gpu'"):
        TrainConfig(train=str(tmp_path), engine="cpu")


def test_devices():
    assert [parse_device(d) for d in ("auto", "CPU", "cuda", "cuda:1", " CUDA:0 ")] == \
           ["auto", "cpu", "cuda", "cuda:1", "cuda:0"]
    for bad in ("gpu", "cuda:x", "cpu:0", "cuda:"):
        with pytest.raises(ValueError, match="auto, cuda, cuda:N or cpu"):
            parse_device(bad)


def test_numbers_are_checked(tmp_path):
    with pytest.raises(TrainError, match="--timeout must be a positive number of seconds"):
        TrainConfig(train=str(tmp_path), timeout=0)
    with pytest.raises(TrainError, match="--batch-size must be at least 1"):
        TrainConfig(train=str(tmp_path), batch_size=0)


# -- light to build --------------------------------------------------------------------

PROBE = """
import sys
from feedline.cli import build_parser
from feedline.train.command import main
build_parser("train").parse_args(["train", "x", "--arch", "tiny"])
import feedline.train
heavy = sorted(m for m in ("torch", "numpy", "cv2", "lmdb", "h5py") if m in sys.modules)
print(",".join(heavy) or "none")
"""


def test_building_the_parser_imports_no_torch():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"


def test_python_m_feedline_train_has_the_same_options():
    helps = [subprocess.run([sys.executable, "-m", *cmd, "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=60, env=dict(subprocess_env(), COLUMNS="100")).stdout
             for cmd in (["feedline", "train"], ["feedline.train"])]
    options = [h[h.index("positional arguments"):] for h in helps]
    assert options[0] == options[1].replace("  -v, --verbose         log debug messages\n", "")


# -- what a log file shows -------------------------------------------------------------

def test_a_run_logs_to_a_file_without_a_terminal(tmp_path):
    """stderr is a file here: a line after the first step, then every --log-every steps; no
    tensor-core warning for a batch of 12 on the CPU."""
    data = pack(two_class_folder(tmp_path / "src", 24, seed=5), tmp_path / "train.lmdb")
    args = [str(data), *FAST, "--batch-size", "12", "--log-every", "3", "--epochs", "2",
            "--size-start", "16", "--size-ramp-epochs", "1",   # FAST's --size 32 from the second epoch
            "--synthetic-steps", "0", "--out", str(tmp_path / "out")]
    with open(tmp_path / "log.txt", "w") as log:
        done = subprocess.run([sys.executable, "-m", "feedline", "train", *args], cwd=REPO, env=subprocess_env(),
                              stdout=subprocess.DEVNULL, stderr=log, timeout=120)
    text = (tmp_path / "log.txt").read_text()
    assert done.returncode == 0, text
    steps = [int(m) for m in re.findall(r"INFO feedline.train: epoch \d step (\d+) ", text)]
    assert steps == [1, 3, 6]  # 4 steps per epoch, 8 in all: the first, then every third
    # One numbering (from 1) in the log and metrics.jsonl, and each epoch's size in both.
    assert "epoch 1/2 (size 16): train loss" in text and "epoch 2/2 (size 32): train loss" in text
    logged = re.findall(r"epoch (\d) step \d+ \[\d+/\d+\] size (\d+) ", text)
    assert logged == [("1", "16"), ("1", "16"), ("2", "32")]
    assert [(e["epoch"], e["size"]) for e in events(tmp_path / "out", "epoch")] == [(1, [16, 16]), (2, [32, 32])]
    assert [(str(e["epoch"]), str(e["size"][0])) for e in events(tmp_path / "out", "step")] == logged
    assert "multiple of 8" not in text and "\r" not in text  # no progress bar either
