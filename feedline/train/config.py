"""TrainConfig: every option of the trainer, with its help, checked when built.

The command line is generated from these fields (feedline/core/flags.py): a field's
name is its flag, its default the flag's default, ``metadata["help"]`` its help. No
torch here: `feedline train --help` must not pay for importing it.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from enum import Enum

from ..core.choices import Choice, Engine, OnError, Order
from .choices import AmpDtype, Arch, Autocast, RegressionLoss, TaskChoice, parse_device
from .errors import TrainError
from .optim_options import OptimOptions
from .recipe_options import RecipeOptions


def option(default, help: str, group: str | None = None, **cli):
    """A TrainConfig field with the command line's view of it: ``help``, the ``group`` it is
    listed under, and argparse details (``metavar``, ``nargs``, ``const``, ``positional``,
    ``default_text`` for a default that needs words)."""
    return field(default=default, metadata={"help": help, "group": group, **cli})


MODEL, DATA, SPEED, RUN, CHECK = ("model and schedule", "data", "speed", "reports, checkpoints and failures",
                                  "reproducibility and measurement")


@dataclass
class TrainConfig(RecipeOptions, OptimOptions):
    """Options of one training run. Batch size is per rank and per micro-step: the optimizer
    sees ``batch_size * accum_steps * world_size`` images per step."""

    train: str | None = option(
        None, "training data: a packed .lmdb/.h5 file or an image folder (optional with --synthetic)",
        positional=True, metavar="TRAIN", nargs="?")
    val: str | None = option(
        None, "validation data, same classes as TRAIN: loss, top-1 and top-5 after each epoch, every "
        "image counted once over all ranks", metavar="VAL")
    # -- model and schedule
    arch: Arch = option(Arch.RESNET50, "resnet18, resnet50 (torchvision's layout, no torchvision needed) "
                        "or tiny, a 4-layer CNN for quick CPU runs", MODEL, aliases=("--model",))
    epochs: int = option(90, "passes over TRAIN", MODEL)
    batch_size: int = option(256, "images per rank per micro-step; a multiple of 8 suits tensor cores", MODEL,
                             aliases=("-b",))
    accum_steps: int = option(1, "micro-steps per optimizer step (gradient accumulation); DDP all-reduces "
                              "only on the last one (no_sync)", MODEL, metavar="N")
    lr: float | None = option(None, "peak learning rate", MODEL,
                              default_text="0.1 x global batch / 256 (its square root for adam, adamw and lamb), "
                                           "timm's rule")
    momentum: float = option(0.9, "SGD momentum (timm's and torchvision's)", MODEL)
    weight_decay: float = option(2e-5, "timm's default (torchvision's ResNet-50 recipe: 1e-4); not applied to "
                                 "BatchNorm parameters and biases, as timm", MODEL)
    warmup_epochs: float = option(5.0, "linear warmup from --warmup-lr to the peak, then the --sched decay "
                                  "(timm's); never shortened: a run shorter than its warmup says so", MODEL)
    label_smoothing: float = option(0.1, "regularizes over-confident logits (Szegedy et al., Inception v3)",
                                    MODEL, aliases=("--smoothing",))
    task: TaskChoice = option(TaskChoice.AUTO, "what to learn: classify (label), multilabel (labels), regress (target) "
                              "or segment (mask); auto = the store's one such field, refused when it has several", MODEL)
    regression_loss: RegressionLoss = option(RegressionLoss.MSE, "loss of a `target` field: mse or smooth-l1", MODEL)
    zero_init_residual: bool = option(True, "start each residual block's last BatchNorm at gamma 0, so "
                                      "blocks start as identity", MODEL)
    size: int = option(224, "training crop and validation size", MODEL, aliases=("--img-size",))
    num_classes: int | None = option(None, "classifier width", MODEL,
                                     default_text="from the data; 1000 with --synthetic and no TRAIN")
    # -- data
    engine: Engine = option(Engine.AUTO, "who makes batches: processes (decoders in worker processes), threads "
                            "(the same in this process), dali, gpu (nvImageCodec); auto = dali on a GPU when DALI is "
                            "installed, else processes", DATA)
    decoder: str = option("auto", "the CPU engine's JPEG decoder: nvimgcodec, turbojpeg, simplejpeg, opencv, pil "
                          "or a plugin's; auto = the fastest strict one installed", DATA, metavar="NAME")
    threads: int | str = option("auto", "worker processes (or threads) of the loader; auto: this rank's share of the usable CPU cores (torchrun's LOCAL_WORLD_SIZE ranks on a node split them)", DATA,
                                aliases=("--workers", "-j"))
    on_error: OnError = option(
        OnError.SUBSTITUTE, "a record that cannot be read or decoded: substitute puts another record in "
        "its place and logs it, so one bad JPEG never stops a run; raise stops with the record's index "
        "and path. (FeedLoader's own default is raise.)", DATA)
    order: Order = option(Order.RANDOM, "training order: random (a new permutation each epoch), "
                          "quasi-random (shuffled blocks of neighbours, for data bigger than RAM) or shards "
                          "(shards dealt to the ranks; always used for an s3:// data set, so each rank "
                          "fetches only its shards); validation always reads in order", DATA)
    # -- speed
    amp: bool = option(False, "timm's --amp: mixed precision in --amp-dtype (float16 with a GradScaler); "
                       "without it --autocast decides", SPEED)
    amp_dtype: AmpDtype = option(AmpDtype.FLOAT16, "--amp's dtype (timm's)", SPEED)
    autocast: Autocast = option(Autocast.AUTO, "feedline's own mixed-precision choice when --amp is not given: "
                                "bf16 (no loss scaling), fp16 (with a GradScaler), off (float32); auto = bf16 on "
                                "GPUs that support it, fp16 on older ones, off on the CPU", SPEED)
    channels_last: bool = option(True, "channels_last model and input: cuDNN's fast NHWC convolutions "
                                 "under AMP", SPEED)
    compile: bool = option(False, "torch.compile the model (slow first steps, faster after)", SPEED)
    cudnn_benchmark: bool = option(True, "let cuDNN time its algorithms for the fixed input shape (off with "
                                   "--deterministic)", SPEED)
    sync_bn: bool = option(False, "SyncBatchNorm across GPUs: for small per-GPU batches (CUDA only)", SPEED)
    device: str = option("auto", "auto (this rank's GPU if CUDA is usable, else the CPU), cuda, cuda:N or cpu",
                         SPEED, metavar="auto|cuda|cuda:N|cpu")
    # -- reports, checkpoints and failures
    out: str = option("runs/train", "checkpoint.pt and metrics.jsonl go here", RUN, metavar="DIR")
    log_every: int = option(50, "optimizer steps between log lines, in a terminal or not (the first "
                            "step is logged too); the loss is read back from the device only then", RUN,
                            metavar="N")
    progress: bool | None = option(None, "a progress bar besides the log lines", RUN,
                                   default_text="when stderr is a terminal")
    save_every: int = option(0, "also save a checkpoint every N optimizer steps, mid-epoch (0: at the end "
                             "of each epoch only)", RUN, metavar="N")
    overwrite: bool = option(False, "start afresh in a DIR that holds a run (replacing its checkpoint.pt and "
                             "metrics.jsonl); without it or --resume, such a DIR is refused", RUN)
    resume: str | None = option(None, "continue exactly where a checkpoint stopped, mid-epoch included "
                                "(CKPT defaults to DIR/checkpoint.pt)", RUN, metavar="CKPT", nargs="?",
                                const="auto")
    max_steps: int | None = option(None, "stop after N optimizer steps and save, as if interrupted; the "
                                   "schedule still spans --epochs, so --resume continues the same run",
                                   RUN, metavar="N")
    timeout: float = option(300.0, "seconds a rank waits for the others in a collective (all-reduce, "
                            "checkpoint, validation) before it stops with an error: a rank or node that "
                            "died or hangs ends the job within about this time; raise it when saving a "
                            "checkpoint or --compile's first step takes longer", RUN, metavar="SECONDS")
    # -- reproducibility and measurement
    seed: int = option(0, "model init, data order and augmentation", CHECK)
    deterministic: bool = option(False, "deterministic kernels, no cuDNN autotuning: bitwise-repeatable "
                                 "runs, somewhat slower", CHECK)
    synthetic: bool = option(False, "train on random tensors already on the device instead of data: the "
                             "model's throughput ceiling", CHECK)
    synthetic_steps: int = option(20, "steps of the synthetic measurement after training (0 skips it) or "
                                  "of a --synthetic run", CHECK, metavar="N")

    def __post_init__(self) -> None:
        self._parse_choices()
        check_numbers(self)
        self._check_recipe()
        self._check_optim()
        check_paths(self)

    def _parse_choices(self) -> None:
        for name, kind in choice_fields().items():
            try:
                setattr(self, name, kind.parse(getattr(self, name), flag(name)))
            except ValueError as exc:
                raise TrainError(str(exc)) from None
        try:
            self.device = parse_device(self.device)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
        check_engine_and_decoder(self)
        if not isinstance(self.amp, bool):
            raise TrainError(f"--amp is timm's switch (on or off), got {self.amp!r}; the dtype is --amp-dtype "
                             "float16|bfloat16, or feedline's --autocast bf16|fp16|off without --amp")
        if self.amp and self.autocast is not Autocast.AUTO:
            raise TrainError(f"--amp (timm's, with --amp-dtype) and --autocast {self.autocast.value} both choose the "
                             "mixed precision: give one")
        if self.threads != "auto":
            try:
                self.threads = int(self.threads)
            except (TypeError, ValueError):
                raise TrainError(f"--threads must be 'auto' or a number, got {self.threads!r}") from None
            if self.threads < 1:
                raise TrainError(f"--threads must be at least 1, got {self.threads}")

    @property
    def precision(self) -> Autocast:
        """The autocast choice: timm's --amp (in --amp-dtype), else --autocast."""
        if self.amp:
            return Autocast.BF16 if self.amp_dtype is AmpDtype.BFLOAT16 else Autocast.FP16
        return self.autocast

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.out, "checkpoint.pt")

    @property
    def resume_path(self) -> str | None:
        if self.resume is None:
            return None
        return self.checkpoint_path if self.resume == "auto" else self.resume

    def to_dict(self) -> dict:
        """Plain values (Enums as their strings): for JSON and for checkpoints that load
        with ``weights_only=True``."""
        return {k: v.value if isinstance(v, Enum) else v for k, v in dataclasses.asdict(self).items()}


def check_numbers(cfg: TrainConfig) -> None:
    """Counts at least 1, rates and sizes not negative, a positive learning rate and timeout."""
    at_least_1 = ("epochs", "batch_size", "accum_steps", "size", "log_every")
    not_negative = ("save_every", "synthetic_steps", "warmup_epochs", "weight_decay", "momentum")
    for name in at_least_1:
        if int(getattr(cfg, name)) < 1:
            raise TrainError(f"{flag(name)} must be at least 1, got {getattr(cfg, name)}")
    for name in not_negative:
        if getattr(cfg, name) < 0:
            raise TrainError(f"{flag(name)} must not be negative, got {getattr(cfg, name)}")
    for name in ("max_steps", "num_classes"):
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise TrainError(f"{flag(name)} must be at least 1, got {getattr(cfg, name)}")
    if cfg.lr is not None and not cfg.lr > 0:
        raise TrainError(f"--lr must be positive, got {cfg.lr}")
    if not cfg.timeout > 0:
        raise TrainError(f"--timeout must be a positive number of seconds, got {cfg.timeout}")
    if cfg.synthetic and cfg.synthetic_steps < 1:
        raise TrainError("--synthetic needs --synthetic-steps of at least 1")


def check_paths(cfg: TrainConfig) -> None:
    """TRAIN given (or --synthetic), and each path given exists."""
    if cfg.train is None and not cfg.synthetic:
        raise TrainError("no training data: pass TRAIN (a packed .lmdb/.h5 file or an image "
                         "folder), or --synthetic to measure the model on random tensors")
    from ..core.errors import FeedlineError
    from ..dataset.urls import check_url, url_scheme
    for name, path in (("TRAIN", cfg.train), ("--val", cfg.val)):
        if path is not None and url_scheme(path):
            try:
                check_url(path)   # a bucket is looked at when opened
            except FeedlineError as exc:
                raise TrainError(f"{name} {exc}") from None
        elif path is not None and not os.path.exists(path):
            raise TrainError(f"{name} {path}: no such file or folder; pass a packed data set "
                             "(`feedline pack SRC OUT.lmdb`) or an image folder")


def check_engine_and_decoder(cfg: TrainConfig) -> None:
    """--engine and --decoder checked by name (nothing is built here: no torch)."""
    from ..decoders.selection import check_names
    try:
        cfg.engine, cfg.decoder = check_names(cfg.engine, cfg.decoder)
    except ValueError as exc:
        raise TrainError(f"--engine/--decoder: {exc}") from None


def flag(name: str) -> str:
    """The command-line spelling of a field: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def choice_fields() -> dict[str, type[Choice]]:
    """TrainConfig's fields whose type is a Choice Enum, with that Enum."""
    hints = typing.get_type_hints(TrainConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(TrainConfig)
            if isinstance(hints[f.name], type) and issubclass(hints[f.name], Choice)}
