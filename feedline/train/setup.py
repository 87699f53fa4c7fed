"""Set-up of a run: process-wide torch switches, the autocast dtype, the wrapped model with
its optimizer, schedule and gradient scaler."""
from __future__ import annotations

import os
import random

import numpy as np
import torch
from torch import nn

from .config import TrainConfig, TrainError
from .distributed import DistInfo
from .models import build_model
from .choices import Autocast as AmpMode
from .step import Amp, GradClip, StepRunner, make_optimizer
from .task import CLASSIFY, FieldLoss
from .ema import ModelEma
from .schedule import WarmupSchedule

WARMUP_MICRO = 3  # micro-steps left out of throughput: cudnn autotuning, compilation, first allocations


def configure_torch(cfg: TrainConfig, info: DistInfo) -> None:
    """Process-wide switches, set here explicitly once per run (a training program owns its
    process): seeds, determinism, cudnn autotuning, TF32 matmuls."""
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)  # same on every rank: DDP starts from rank 0's weights anyway
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # required by cuBLAS
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    else:
        torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
    if info.device.type == "cuda" and not cfg.deterministic:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def resolve_amp(mode: str | AmpMode, device: torch.device) -> Amp:
    """``auto``: bf16 on GPUs that have it (no loss scaling needed), fp16 on older GPUs,
    full float32 on the CPU, where bf16 autocast is only fast with AMX."""
    mode = AmpMode.parse(mode, "--autocast")
    if mode is AmpMode.AUTO:
        if device.type == "cuda":
            mode = AmpMode.BF16 if torch.cuda.is_bf16_supported() else AmpMode.FP16
        else:
            mode = AmpMode.OFF
    dtype = {AmpMode.BF16: torch.bfloat16, AmpMode.FP16: torch.float16, AmpMode.OFF: None}[mode]
    return Amp(device.type, dtype)


def place_model(cfg: TrainConfig, info: DistInfo, num_classes: int, segment: bool = False) -> nn.Module:
    """A fresh --arch model on this rank's device (``segment``: under an FCN head), in
    channels_last when asked, with SyncBatchNorm when asked (CUDA only)."""
    raw = build_model(cfg.arch, num_classes, cfg.zero_init_residual, segment)
    if cfg.sync_bn and info.distributed:
        if info.device.type != "cuda":
            raise TrainError("--sync-bn needs CUDA GPUs (SyncBatchNorm has no CPU path); drop it on CPU")
        raw = nn.SyncBatchNorm.convert_sync_batchnorm(raw)
    fmt = torch.channels_last if cfg.channels_last else torch.preserve_format
    return raw.to(info.device, memory_format=fmt)


def peak_lr(cfg: TrainConfig, world_size: int) -> float:
    """--lr, or timm's rule from its --lr-base 0.1 and --lr-base-size 256: 0.1 x global batch / 256
    (Goyal et al.'s linear scaling) for SGD, its square root for Adam-family optimizers and Lamb."""
    if cfg.lr is not None:
        return cfg.lr
    ratio = cfg.batch_size * cfg.accum_steps * world_size / 256
    return 0.1 * (ratio ** 0.5 if str(cfg.opt.value) in ("adam", "adamw", "lamb") else ratio)


def build_runner(raw: nn.Module, cfg: TrainConfig, info: DistInfo, amp: Amp, lr: float,
                 warmup_steps: int, total_steps: int, criterion: nn.Module | None = None) -> StepRunner:
    """Wrap ``raw`` for this run: DDP across ranks, torch.compile when asked; add the optimizer,
    the lr schedule and, with fp16, the gradient scaler (bf16 has fp32's range: no scaler)."""
    ddp = None
    net: nn.Module = raw
    if info.distributed:
        device_ids = [info.device] if info.device.type == "cuda" else None
        ddp = nn.parallel.DistributedDataParallel(raw, device_ids=device_ids, gradient_as_bucket_view=True)
        net = ddp
    if cfg.compile:
        net = torch.compile(net)
    optimizer = make_optimizer(raw, lr, cfg.momentum, cfg.weight_decay, str(cfg.opt.value))
    steps_per_epoch = total_steps / max(cfg.epochs, 1)
    scheduler = WarmupSchedule(optimizer, lr, warmup_steps, total_steps, str(cfg.sched.value),
                               decay_steps=max(int(round(cfg.decay_epochs * steps_per_epoch)), 1),
                               decay_rate=cfg.decay_rate, warmup_lr=cfg.warmup_lr, min_lr=cfg.min_lr,
                               milestones=tuple(int(round(m * steps_per_epoch)) for m in cfg.decay_milestones))
    ema = ModelEma(raw, cfg.model_ema_decay) if cfg.model_ema else None
    scaler = torch.amp.GradScaler(info.device.type) if amp.dtype == torch.float16 else None
    if criterion is None:   # the run's task says otherwise (task.py); synthetic steps classify
        criterion = FieldLoss(CLASSIFY, "label", label_smoothing=cfg.label_smoothing)
    clip = GradClip(cfg.clip_grad, str(cfg.clip_mode.value)) if cfg.clip_grad is not None else None
    return StepRunner(net, ddp, optimizer, scheduler, scaler, criterion, amp, ema=ema, raw=raw, clip=clip)
