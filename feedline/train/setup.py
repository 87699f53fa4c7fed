"""Set-up of a run: process-wide torch switches, the autocast dtype, the wrapped model with
its optimizer, schedule and gradient scaler."""
from __future__ import annotations

import os
import random

import numpy as np
import torch
from torch import nn

from .config import TrainConfig
from .distributed import DistInfo
from .loop import Amp, StepRunner, make_optimizer
from .schedule import WarmupCosine

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


def resolve_amp(mode: str, device: torch.device) -> Amp:
    """``auto``: bf16 on GPUs that have it (no loss scaling needed), fp16 on older GPUs,
    full float32 on the CPU, where bf16 autocast is only fast with AMX."""
    if mode == "auto":
        if device.type == "cuda":
            mode = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            mode = "off"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}[mode]
    return Amp(device.type, dtype)


def build_runner(raw: nn.Module, cfg: TrainConfig, info: DistInfo, amp: Amp, lr: float,
                 warmup_steps: int, total_steps: int) -> StepRunner:
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
    optimizer = make_optimizer(raw, lr, cfg.momentum, cfg.weight_decay)
    scheduler = WarmupCosine(optimizer, lr, warmup_steps, total_steps)
    scaler = torch.amp.GradScaler(info.device.type) if amp.dtype == torch.float16 else None
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    return StepRunner(net, ddp, optimizer, scheduler, scaler, criterion, amp)
