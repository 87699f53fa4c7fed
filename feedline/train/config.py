"""TrainConfig: every option of the trainer, checked when built. The CLI maps flags onto it."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..errors import FeedlineError

ARCHS = ("resnet18", "resnet50", "tiny")
AMP_MODES = ("auto", "bf16", "fp16", "off")
DEVICES = ("auto", "cuda", "cpu")


class TrainError(FeedlineError):
    """A trainer option or input the user can fix: bad flag values, unusable data, checkpoints."""


@dataclass
class TrainConfig:
    """Options of one training run. Batch size is per rank and per micro-step: the optimizer
    sees ``batch_size * accum_steps * world_size`` images per step."""

    train: str | None = None          # data set: packed .lmdb/.h5 file or image folder
    val: str | None = None
    arch: str = "resnet50"
    epochs: int = 90
    batch_size: int = 256
    lr: float | None = None           # None: 0.1 x global batch / 256 (Goyal et al.)
    momentum: float = 0.9
    weight_decay: float = 5e-5        # not applied to BatchNorm parameters and biases
    warmup_epochs: float = 5.0        # capped at a fifth of the run
    label_smoothing: float = 0.1
    amp: str = "auto"                 # auto: bf16 where supported on CUDA, off on CPU
    channels_last: bool = True
    compile: bool = False
    accum_steps: int = 1
    threads: int | str = "auto"       # decode threads of the loader
    decoder: str = "auto"
    size: int = 224
    out: str = "runs/train"
    resume: str | None = None         # a checkpoint path, or "auto": OUT/checkpoint.pt
    seed: int = 0
    deterministic: bool = False
    synthetic: bool = False
    synthetic_steps: int = 20         # steps of the synthetic measurement; 0 skips it
    num_classes: int | None = None    # from the data; needed with --synthetic and no TRAIN
    log_every: int = 50
    save_every: int = 0               # optimizer steps between mid-epoch checkpoints; 0: per epoch only
    max_steps: int | None = None      # stop early, as if interrupted; the schedule still spans epochs
    sync_bn: bool = False
    device: str = "auto"
    cudnn_benchmark: bool = True
    zero_init_residual: bool = True
    progress: bool | None = None      # None: a progress bar when stderr is a terminal

    def __post_init__(self) -> None:
        self._check_choices()
        self._check_numbers()
        self._check_paths()

    def _check_choices(self) -> None:
        if self.arch not in ARCHS:
            raise TrainError(f"unknown architecture {self.arch!r}; choose --arch {' | '.join(ARCHS)}")
        if self.amp not in AMP_MODES:
            raise TrainError(f"unknown --amp {self.amp!r}; choose one of {', '.join(AMP_MODES)}")
        if self.device not in DEVICES and not str(self.device).startswith("cuda:"):
            raise TrainError(f"unknown --device {self.device!r}; choose auto, cuda, cuda:N or cpu")
        if self.threads != "auto":
            try:
                self.threads = int(self.threads)
            except (TypeError, ValueError):
                raise TrainError(f"--threads must be 'auto' or a number, got {self.threads!r}") from None
            if self.threads < 1:
                raise TrainError(f"--threads must be at least 1, got {self.threads}")

    def _check_numbers(self) -> None:
        positive = {"epochs": self.epochs, "batch_size": self.batch_size, "accum_steps": self.accum_steps,
                    "size": self.size, "log_every": self.log_every}
        for name, value in positive.items():
            if int(value) < 1:
                raise TrainError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        non_negative = {"save_every": self.save_every, "synthetic_steps": self.synthetic_steps,
                        "warmup_epochs": self.warmup_epochs, "weight_decay": self.weight_decay,
                        "momentum": self.momentum}
        for name, value in non_negative.items():
            if value < 0:
                raise TrainError(f"--{name.replace('_', '-')} must not be negative, got {value}")
        if self.lr is not None and not self.lr > 0:
            raise TrainError(f"--lr must be positive, got {self.lr}")
        if not 0 <= self.label_smoothing < 1:
            raise TrainError(f"--label-smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.max_steps is not None and self.max_steps < 1:
            raise TrainError(f"--max-steps must be at least 1, got {self.max_steps}")
        if self.num_classes is not None and self.num_classes < 1:
            raise TrainError(f"--num-classes must be at least 1, got {self.num_classes}")
        if self.synthetic and self.synthetic_steps < 1:
            raise TrainError("--synthetic needs --synthetic-steps of at least 1")

    def _check_paths(self) -> None:
        if self.train is None and not self.synthetic:
            raise TrainError("no training data: pass TRAIN (a packed .lmdb/.h5 file or an image "
                             "folder), or --synthetic to measure the model on random tensors")
        for flag, path in (("TRAIN", self.train), ("--val", self.val)):
            if path is not None and not os.path.exists(path):
                raise TrainError(f"{flag} {path}: no such file or folder; pass a packed data set "
                                 "(`feedline pack SRC OUT.lmdb`) or an image folder")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.out, "checkpoint.pt")

    @property
    def resume_path(self) -> str | None:
        if self.resume is None:
            return None
        return self.checkpoint_path if self.resume == "auto" else self.resume

    def to_dict(self) -> dict:
        return asdict(self)
