"""One training run from a TrainConfig: set-up, the epochs, checkpoints, the synthetic ceiling."""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field

import torch
from torch import nn

from . import checkpoint, distributed
from .config import TrainConfig, TrainError
from .data import Data, make_loader, open_data
from .distributed import DistInfo
from .loop import Progress, StepRunner, evaluate, train_epoch
from .models import build_model
from .report import Reporter
from .schedule import warmup_steps_for
from .setup import WARMUP_MICRO, build_runner, configure_torch, resolve_amp
from .synthetic import SyntheticLoader, measure_synthetic

CHECKPOINT_FORMAT = "feedline-train"
CHECKPOINT_VERSION = 1


@dataclass
class TrainResult:
    steps: int                                   # optimizer steps done (this rank)
    epochs_done: int
    history: list[dict] = field(default_factory=list)   # one record per finished epoch
    real_images_per_s: float | None = None       # per rank, training with the loader
    synthetic_images_per_s: float | None = None  # per rank, same model on device-resident tensors
    steps_per_rank: list[int] = field(default_factory=list)
    ranks_in_sync: bool | None = None            # identical parameters on every rank (DDP only)
    stopped_early: bool = False                  # --max-steps ended the run
    checkpoint: str | None = None
    metrics: str | None = None

    @property
    def pipeline_share(self) -> float | None:
        """real / synthetic: the share of the model's speed the data pipeline delivers."""
        if not self.real_images_per_s or not self.synthetic_images_per_s:
            return None
        return self.real_images_per_s / self.synthetic_images_per_s


class Trainer:
    """Owns the run's loaders and model; ``run()`` trains and returns a TrainResult."""

    def __init__(self, cfg: TrainConfig, info: DistInfo):
        self.cfg, self.info = cfg, info
        configure_torch(cfg, info)
        self.amp = resolve_amp(cfg.amp, info.device)
        self.input_dtype = self.amp.dtype or torch.float32
        self.data: Data = open_data(cfg, info)
        self.resume_state = checkpoint.load(cfg.resume_path) if cfg.resume_path else None
        self.reporter = Reporter(cfg.out, info.is_main, info.world_size, cfg.progress,
                                 append=self.resume_state is not None)
        self.train_loader = self.val_loader = None
        self.result = TrainResult(steps=0, epochs_done=0, metrics=self.reporter.path if info.is_main else None)

    # -- set-up ------------------------------------------------------------------------
    def _build_model(self) -> nn.Module:
        cfg, info = self.cfg, self.info
        raw = build_model(cfg.arch, self.data.num_classes, cfg.zero_init_residual)
        if cfg.sync_bn and info.distributed:
            if info.device.type != "cuda":
                raise TrainError("--sync-bn needs CUDA GPUs (SyncBatchNorm has no CPU path); drop it on CPU")
            raw = nn.SyncBatchNorm.convert_sync_batchnorm(raw)
        fmt = torch.channels_last if cfg.channels_last else torch.preserve_format
        return raw.to(info.device, memory_format=fmt)

    def _lr(self) -> float:
        cfg = self.cfg
        global_batch = cfg.batch_size * cfg.accum_steps * self.info.world_size
        return cfg.lr if cfg.lr is not None else 0.1 * global_batch / 256

    def _warn_about_options(self) -> None:
        cfg, rep = self.cfg, self.reporter
        if cfg.batch_size % 8:
            rep.warning("--batch-size %d is not a multiple of 8: tensor cores and cuDNN kernels are "
                        "fastest on multiples of 8", cfg.batch_size)
        if self.resume_state is None and os.path.exists(cfg.checkpoint_path):
            rep.warning("%s exists and will be overwritten; pass --resume to continue it",
                        cfg.checkpoint_path)

    def _check_resume(self, state: dict, steps_per_epoch: int) -> None:
        cfg = self.cfg
        saved = state.get("config", {})
        if state.get("format") != CHECKPOINT_FORMAT:
            raise TrainError(f"{cfg.resume_path}: not a feedline training checkpoint")
        for key in ("arch", "batch_size", "accum_steps", "seed", "epochs"):
            if saved.get(key) != getattr(cfg, key):
                raise TrainError(f"{cfg.resume_path} was written with --{key.replace('_', '-')} "
                                 f"{saved.get(key)}, this run has {getattr(cfg, key)}; resume with the "
                                 "same options")
        if state.get("num_classes") != self.data.num_classes:
            raise TrainError(f"{cfg.resume_path} has {state.get('num_classes')} classes, the data "
                             f"{self.data.num_classes}; resume on the same data set")
        if state.get("world_size") != self.info.world_size:
            raise TrainError(f"{cfg.resume_path} was written by {state.get('world_size')} ranks, this run "
                             f"has {self.info.world_size}; resume with the same number of processes")
        if state.get("steps_per_epoch") != steps_per_epoch:
            raise TrainError(f"{cfg.resume_path}: {state.get('steps_per_epoch')} steps per epoch, this run "
                             f"{steps_per_epoch}; resume on the same data set")

    # -- checkpoints -------------------------------------------------------------------
    def _global_loss(self, loss_sum: float, samples: int) -> tuple[float, int]:
        t = torch.tensor([loss_sum, float(samples)], dtype=torch.float64, device=self.info.device)
        total_loss, total_samples = distributed.all_reduce_sum(t, self.info).tolist()
        return total_loss, int(total_samples)

    def _save(self, raw: nn.Module, runner: StepRunner, progress: Progress, loader_state: dict | None,
              steps_per_epoch: int) -> None:
        """Collective when distributed (epoch loss is summed over ranks); only rank 0 writes."""
        loss_sum, samples = self._global_loss(progress.loss_sum, progress.samples)
        if not self.info.is_main:
            return
        # Each rank restores 1/world of the epoch's totals, so their sum stays right.
        world = self.info.world_size
        saved = dataclasses.replace(progress, loss_sum=loss_sum / world, samples=samples // world)
        state = {
            "format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "config": self.cfg.to_dict(),
            "num_classes": self.data.num_classes, "world_size": world, "steps_per_epoch": steps_per_epoch,
            "model": raw.state_dict(), "optimizer": runner.optimizer.state_dict(),
            "scheduler": runner.scheduler.state_dict(),
            "scaler": runner.scaler.state_dict() if runner.scaler is not None else None,
            "progress": dataclasses.asdict(saved), "loader": loader_state,
            "rng": {"torch": torch.get_rng_state()}, "history": self.result.history,
        }
        checkpoint.save(state, self.cfg.checkpoint_path)
        self.result.checkpoint = self.cfg.checkpoint_path
        self.reporter.event("checkpoint", path=self.cfg.checkpoint_path, epoch=progress.epoch,
                            step=progress.step, mid_epoch=loader_state is not None)

    # -- the run -----------------------------------------------------------------------
    def run(self) -> TrainResult:
        try:
            if self.cfg.synthetic:
                return self._run_synthetic_only()
            return self._run()
        finally:
            for loader in (self.train_loader, self.val_loader):
                if loader is not None:
                    loader.close()
            self.reporter.close()

    def _run(self) -> TrainResult:
        cfg, info, rep, result = self.cfg, self.info, self.reporter, self.result
        self._warn_about_options()
        self.train_loader = make_loader(self.data.train, cfg, info, self.input_dtype, train=True)
        if self.data.val is not None:
            self.val_loader = make_loader(self.data.val, cfg, info, self.input_dtype, train=False)
        micro_per_epoch = len(self.train_loader)
        steps_per_epoch = math.ceil(micro_per_epoch / cfg.accum_steps)
        total_steps = steps_per_epoch * cfg.epochs
        warmup = warmup_steps_for(cfg.warmup_epochs, steps_per_epoch, total_steps)
        lr = self._lr()

        raw = self._build_model()
        progress, loader_state = Progress(), None
        state = self.resume_state
        if state is not None:
            self._check_resume(state, steps_per_epoch)
            raw.load_state_dict(state["model"])
            progress = Progress(**state["progress"])
            loader_state = state["loader"]
            result.history = list(state.get("history", []))
            torch.set_rng_state(state["rng"]["torch"])
        runner = build_runner(raw, cfg, info, self.amp, lr, warmup, total_steps)
        if state is not None:
            runner.optimizer.load_state_dict(state["optimizer"])
            runner.scheduler.load_state_dict(state["scheduler"])
            if runner.scaler is not None and state.get("scaler"):
                runner.scaler.load_state_dict(state["scaler"])
            self.resume_state = None  # free the host copy of the weights

        rep.info("training %s on %s: %d classes, %d images, %d rank(s) on %s, amp %s, global batch %d, "
                 "lr %.4g, %d steps/epoch, %d epochs", cfg.arch, cfg.train, self.data.num_classes,
                 len(self.data.train), info.world_size, info.device, self.amp.name,
                 cfg.batch_size * cfg.accum_steps * info.world_size, lr, steps_per_epoch, cfg.epochs)
        rep.event("start", config=cfg.to_dict(), world_size=info.world_size, device=str(info.device),
                  amp=self.amp.name, lr=lr, steps_per_epoch=steps_per_epoch, total_steps=total_steps,
                  warmup_steps=warmup, num_classes=self.data.num_classes,
                  resumed_at={"epoch": progress.epoch, "step": progress.step} if state is not None else None)

        timed_images, timed_s = 0, 0.0
        first = True
        while progress.epoch < cfg.epochs:
            epoch = progress.epoch
            if loader_state is not None:       # mid-epoch resume: the loader continues where it stood
                self.train_loader.load_state_dict(loader_state)
                loader_state = None
            else:
                progress.micro, progress.loss_sum, progress.samples = 0, 0.0, 0
            self.train_loader.set_epoch(epoch)

            def on_step(p: Progress, read_loss_sum) -> bool:
                if cfg.save_every and p.step % cfg.save_every == 0 and p.micro < micro_per_epoch:
                    p.loss_sum = read_loss_sum()
                    self._save(raw, runner, p, self.train_loader.state_dict(), steps_per_epoch)
                return cfg.max_steps is not None and p.step >= cfg.max_steps

            with rep.bar(micro_per_epoch, progress.micro, f"epoch {epoch + 1}/{cfg.epochs}") as bar:
                er = train_epoch(runner, self.train_loader, progress, accum_steps=cfg.accum_steps,
                                 device=info.device, log_every=cfg.log_every, on_log=rep.window,
                                 on_step=on_step, on_micro=bar.update,
                                 warmup_micro=min(WARMUP_MICRO, micro_per_epoch - 1) if first else 0)
            first = False
            timed_images += er.timed_images
            timed_s += er.timed_s
            progress.loss_sum = float(er.loss_sum.item())
            if er.micro_done < micro_per_epoch:  # stopped mid-epoch (--max-steps)
                self._save(raw, runner, progress, self.train_loader.state_dict(), steps_per_epoch)
                result.stopped_early = True
                break
            self._end_epoch(raw, runner, progress, er, steps_per_epoch)
            if er.stopped:
                result.stopped_early = progress.epoch < cfg.epochs
                break

        result.steps = progress.step
        result.epochs_done = progress.epoch
        result.real_images_per_s = timed_images / timed_s if timed_s > 0 else None
        if cfg.synthetic_steps and not result.stopped_early:
            result.synthetic_images_per_s = self._measure_synthetic(raw, lr)
        self._finish(raw, runner)
        return result

    def _end_epoch(self, raw, runner, progress: Progress, er, steps_per_epoch: int) -> None:
        cfg, rep = self.cfg, self.reporter
        loss_sum, samples = self._global_loss(progress.loss_sum, progress.samples)
        record = {"epoch": progress.epoch, "step": progress.step, "train_loss": loss_sum / max(samples, 1),
                  "images_per_s": er.images * self.info.world_size / max(er.elapsed_s, 1e-9),
                  "data_wait": er.wait_s / max(er.elapsed_s, 1e-9), "epoch_s": er.elapsed_s,
                  "lr": runner.last_lr}
        if self.val_loader is not None:
            self.val_loader.set_epoch(progress.epoch)
            record.update(evaluate(raw, self.val_loader, self.amp, self.info.device, self.info,
                                   self.data.num_classes))
        self.result.history.append(record)
        val = (f" | val loss {record['val_loss']:.4f}, top-1 {record['top1']:.1%}, top-5 {record['top5']:.1%}"
               if "top1" in record else "")
        rep.info("epoch %d/%d: train loss %.4f%s | %s img/s, data wait %.0f%%, %.1f s", progress.epoch + 1,
                 cfg.epochs, record["train_loss"], val, f"{record['images_per_s']:,.0f}",
                 100 * record["data_wait"], record["epoch_s"])
        rep.event("epoch", **record)
        progress.epoch += 1
        progress.micro, progress.loss_sum, progress.samples = 0, 0.0, 0
        self._save(raw, runner, progress, None, steps_per_epoch)

    def _measure_synthetic(self, raw: nn.Module, lr: float) -> float | None:
        cfg = self.cfg
        return measure_synthetic(raw, cfg, self.info, self.amp, lr, self.data.num_classes, self.input_dtype)

    def _finish(self, raw: nn.Module, runner: StepRunner) -> None:
        result, rep, info = self.result, self.reporter, self.info
        result.steps_per_rank = [row[0] for row in distributed.gather_ints([result.steps], info)]
        if info.distributed:
            result.ranks_in_sync = distributed.parameters_in_sync(raw, info)
            if not result.ranks_in_sync:
                rep.warning("parameters differ between ranks at the end of the run")
        summary = {"steps": result.steps, "epochs_done": result.epochs_done,
                   "stopped_early": result.stopped_early, "steps_per_rank": result.steps_per_rank,
                   "ranks_in_sync": result.ranks_in_sync, "real_images_per_s": result.real_images_per_s,
                   "synthetic_images_per_s": result.synthetic_images_per_s,
                   "pipeline_share": result.pipeline_share, "checkpoint": result.checkpoint,
                   "final": result.history[-1] if result.history else None}
        if result.pipeline_share is not None:
            rep.info("data pipeline delivers %.0f%% of the model's speed: %s img/s training vs %s img/s "
                     "on synthetic data (per rank)", 100 * result.pipeline_share,
                     f"{result.real_images_per_s:,.0f}", f"{result.synthetic_images_per_s:,.0f}")
        rep.event("summary", **summary)

    def _run_synthetic_only(self) -> TrainResult:
        """--synthetic: the model's throughput ceiling, no data set read, no checkpoint."""
        cfg, info, rep, result = self.cfg, self.info, self.reporter, self.result
        raw = self._build_model()
        lr = self._lr()
        rep.info("synthetic run: %s, %d classes, batch %d x %d ranks, %dx%d, amp %s, %d steps on %s",
                 cfg.arch, self.data.num_classes, cfg.batch_size, info.world_size, cfg.size, cfg.size,
                 self.amp.name, cfg.synthetic_steps, info.device)
        rep.event("start", config=cfg.to_dict(), world_size=info.world_size, device=str(info.device),
                  amp=self.amp.name, lr=lr, synthetic=True, num_classes=self.data.num_classes)
        runner = build_runner(raw, cfg, info, self.amp, lr, 0, cfg.synthetic_steps)
        loader = SyntheticLoader(cfg.batch_size, cfg.size, self.data.num_classes, cfg.synthetic_steps,
                                 info.device, self.input_dtype, cfg.channels_last, cfg.seed)
        progress = Progress()
        er = train_epoch(runner, loader, progress, accum_steps=cfg.accum_steps, device=info.device,
                         log_every=cfg.log_every, on_log=rep.window,
                         warmup_micro=min(WARMUP_MICRO, cfg.synthetic_steps - 1))
        result.steps = progress.step
        result.synthetic_images_per_s = er.timed_images / er.timed_s if er.timed_s > 0 else None
        if result.synthetic_images_per_s:
            rep.info("synthetic ceiling: %s img/s per rank, %s img/s in all",
                     f"{result.synthetic_images_per_s:,.0f}",
                     f"{result.synthetic_images_per_s * info.world_size:,.0f}")
        self._finish(raw, runner)
        return result


def train(cfg: TrainConfig, env=None) -> TrainResult:
    """Train as ``cfg`` says, in this process or as one rank of a torchrun job (from ``env``,
    by default the process environment)."""
    info = distributed.init(cfg.device, env)
    try:
        return Trainer(cfg, info).run()
    finally:
        distributed.cleanup(info)
