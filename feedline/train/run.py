"""One training run from a TrainConfig: set-up, the epochs, and what ends them.

The pieces live beside this module: the step (step.py), the loop and its meters (loop.py),
validation (evaluate.py), checkpoints and resume (resume.py, checkpoint.py), the summary
(result.py), the synthetic ceiling (synthetic.py), and what a failure outside the run
says (failures.py).
"""
from __future__ import annotations

import math
import os

import torch
from torch import nn

from . import checkpoint, distributed, failures
from .config import TrainConfig, TrainError
from .data import Data, make_loader, open_data
from .distributed import DistInfo
from .evaluate_targets import validate
from .loop import EpochResult, Progress, train_epoch
from .report import Reporter
from .result import TrainResult, finish
from .resume import Checkpoints
from .schedule import warmup_steps_for
from .setup import WARMUP_MICRO, build_runner, configure_torch, peak_lr, place_model, resolve_amp
from .step import StepRunner
from .synthetic import measure_synthetic, run_synthetic_only
from .task import SEGMENTATION, task_of


class Trainer:
    """Owns the run's loaders, model and checkpoints; ``run()`` trains and returns a TrainResult."""

    def __init__(self, cfg: TrainConfig, info: DistInfo):
        self.cfg, self.info = cfg, info
        configure_torch(cfg, info)
        self.amp = resolve_amp(cfg.precision, info.device)
        self.input_dtype = self.amp.dtype or torch.float32
        self.lr = peak_lr(cfg, info.world_size)
        self.data: Data = open_data(cfg, info)
        self.task = task_of(self.data, cfg.task)   # what it learns, from the store's fields and --task
        self.resume_state = checkpoint.load(cfg.resume_path) if cfg.resume_path else None
        refuse_a_run_in_the_way(cfg.out, self.resume_state is not None or cfg.overwrite, info)
        self.reporter = Reporter(cfg.out, info.is_main, info.world_size, cfg.progress,
                                 append=self.resume_state is not None)
        self.train_loader = self.val_loader = None
        self.checkpoints: Checkpoints | None = None
        self.progress = Progress()
        self.result = TrainResult(steps=0, epochs_done=0, metrics=self.reporter.path if info.is_main else None)

    def run(self) -> TrainResult:
        """Train; a dead or silent peer, SIGTERM and Ctrl-C end the run saying where it stood and what next."""
        try:
            with failures.explained(self.info, self.cfg.timeout, self._where, self._resume_hint, self.reporter.warning):
                if self.cfg.synthetic:
                    raw = place_model(self.cfg, self.info, self.data.num_classes)
                    return run_synthetic_only(raw, self.cfg, self.info, self.amp, self.lr, self.data.num_classes,
                                              self.input_dtype, self.reporter, self.result)
                return self._run()
        finally:
            with failures.sigterm_ignored():  # torchrun's SIGTERM to the survivors often comes now
                for loader in (self.train_loader, self.val_loader):
                    if loader is not None:
                        loader.close()
                self.reporter.close()

    def _where(self) -> str:
        return f"epoch {self.progress.epoch + 1}, step {self.progress.step}"

    def _resume_hint(self) -> str:
        if self.checkpoints is None:
            return "nothing was trained or saved yet: run the same command again with --overwrite to start afresh"
        return self.checkpoints.resume_hint()

    # -- set-up ------------------------------------------------------------------------
    def _warn_about_options(self) -> None:
        cfg, rep = self.cfg, self.reporter
        if cfg.batch_size % 8 and self.info.device.type == "cuda":
            rep.warning("--batch-size %d is not a multiple of 8: tensor cores and cuDNN kernels are "
                        "fastest on multiples of 8", cfg.batch_size)

    # -- the run -----------------------------------------------------------------------
    def _run(self) -> TrainResult:
        cfg, info, result = self.cfg, self.info, self.result
        self._warn_about_options()
        self.train_loader = make_loader(self.data.train, cfg, info, self.input_dtype, train=True,
                                        num_classes=self.data.num_classes)
        if self.data.val is not None:
            self.val_loader = make_loader(self.data.val, cfg, info, self.input_dtype, train=False)
        steps_per_epoch = math.ceil(len(self.train_loader) / cfg.accum_steps)
        total_steps = steps_per_epoch * cfg.epochs
        warmup = warmup_said(cfg, steps_per_epoch, self.reporter)
        self.checkpoints = Checkpoints(cfg, info, self.reporter, self.data.num_classes, steps_per_epoch,
                                       len(self.data.train))
        raw = place_model(cfg, info, self.data.num_classes, segment=self.task.kind == SEGMENTATION)
        state, self.resume_state = self.resume_state, None  # the host copy of the weights goes after this
        if state is not None:
            self.checkpoints.restore_model(state, raw)
        runner = build_runner(raw, cfg, info, self.amp, self.lr, warmup, total_steps, self.task.criterion(cfg))
        mid_epoch = state is not None and state["loader"] is not None
        if state is not None:
            self.progress = self.checkpoints.restore_training(state, runner, self.train_loader)
            result.history = list(state.get("history", []))
        self.reporter.start(cfg, info, self.amp.name, len(self.data.train), self.data.num_classes, self.lr,
                            steps_per_epoch, total_steps, warmup,
                            resumed=self.progress if state is not None else None)
        result.real_images_per_s = self._epochs(raw, runner, mid_epoch)
        result.steps, result.epochs_done = self.progress.step, self.progress.epoch
        if cfg.synthetic_steps and not result.stopped_early:
            result.synthetic_images_per_s = measure_synthetic(raw, cfg, info, self.amp, self.lr,
                                                              self.data.num_classes, self.input_dtype,
                                                              *synthetic_targets(self.task, cfg))
        finish(result, raw, info, self.reporter)
        return result

    def _epochs(self, raw: nn.Module, runner: StepRunner, mid_epoch: bool) -> float | None:
        """Train until --epochs or --max-steps (``mid_epoch``: the first continues where the
        restored loader stands); returns images/s per rank after the warm-up."""
        cfg, progress, loader = self.cfg, self.progress, self.train_loader
        micro_per_epoch = len(loader)
        timed_images, timed_s, first = 0, 0.0, True

        def on_step(p: Progress, read_loss_sum) -> bool:
            if cfg.save_every and p.step % cfg.save_every == 0 and p.micro < micro_per_epoch:
                p.loss_sum = read_loss_sum()
                self._save(raw, runner, loader.state_dict())
            return cfg.max_steps is not None and p.step >= cfg.max_steps

        while progress.epoch < cfg.run_epochs:
            if mid_epoch:       # the loader continues where it stood (Checkpoints.restore_training)
                mid_epoch = False
            else:
                progress.micro, progress.loss_sum, progress.samples = 0, 0.0, 0
            loader.set_epoch(progress.epoch)
            with self.reporter.bar(micro_per_epoch, progress.micro,
                                   f"epoch {progress.epoch + 1}/{cfg.run_epochs}") as bar:
                size = loader.config.spec_at(progress.epoch).size   # this epoch's, with a size schedule
                er = train_epoch(runner, loader, progress, accum_steps=cfg.accum_steps, device=self.info.device,
                                 log_every=cfg.log_every, on_log=lambda w: self.reporter.window(w, size),
                                 on_step=on_step, on_micro=bar.update, log_first=first,
                                 warmup_micro=min(WARMUP_MICRO, micro_per_epoch - 1) if first else 0)
            first = False
            timed_images, timed_s = timed_images + er.timed_images, timed_s + er.timed_s
            progress.loss_sum = float(er.loss_sum.item())
            if er.micro_done < micro_per_epoch:  # stopped mid-epoch (--max-steps)
                self._save(raw, runner, loader.state_dict())
                self.result.stopped_early = True
                break
            self._end_epoch(raw, runner, er, size)
            if er.stopped:
                self.result.stopped_early = progress.epoch < cfg.run_epochs
                break
        return timed_images / timed_s if timed_s > 0 else None

    def _end_epoch(self, raw: nn.Module, runner: StepRunner, er: EpochResult, size: tuple[int, int]) -> None:
        progress, info = self.progress, self.info
        bad = self.train_loader.stats.bad_records
        loss_sum, samples, bad_total = distributed.sum_over_ranks(
            [progress.loss_sum, progress.samples, len(bad)], info)
        # Epochs from 1 in the log and metrics.jsonl alike; size: this epoch's crop (a schedule's).
        record = {"epoch": progress.epoch + 1, "step": progress.step, "size": list(size),
                  "train_loss": loss_sum / max(samples, 1),
                  "images_per_s": er.images * info.world_size / max(er.elapsed_s, 1e-9),
                  "data_wait": er.wait_s / max(er.elapsed_s, 1e-9), "epoch_s": er.elapsed_s,
                  "lr": runner.last_lr, "bad_records": int(bad_total)}
        self.result.bad_records += int(bad_total)
        if self.val_loader is not None:
            self.val_loader.set_epoch(progress.epoch)
            record.update(validated(raw, runner, self.val_loader, self.amp, info, self.task, self.cfg))
        self.result.history.append(record)
        self.reporter.epoch(record, self.cfg.run_epochs, bad)
        progress.epoch += 1
        progress.micro, progress.loss_sum, progress.samples = 0, 0.0, 0
        self._save(raw, runner, None)

    def _save(self, raw: nn.Module, runner: StepRunner, loader_state: dict | None) -> None:
        self.checkpoints.save(raw, runner, self.progress, loader_state, self.result.history)
        self.result.checkpoint = self.cfg.checkpoint_path


def warmup_said(cfg: TrainConfig, steps_per_epoch: int, reporter: Reporter) -> int:
    """The warmup's optimizer steps, as long as asked (timm's); a warning when the run ends
    before the rate reaches its peak."""
    warmup = warmup_steps_for(cfg.warmup_epochs, steps_per_epoch)
    if warmup >= steps_per_epoch * cfg.epochs and cfg.warmup_epochs:
        reporter.warning("--warmup-epochs %g is as long as the run's %d epoch(s): the learning rate never reaches "
                         "its peak; pass a shorter --warmup-epochs", cfg.warmup_epochs, cfg.epochs)
    return warmup


def refuse_a_run_in_the_way(out: str, allowed: bool, info: DistInfo) -> None:
    """A TrainError on every rank when ``out`` holds a run (a checkpoint or a metrics log) that
    a fresh start would overwrite, unless ``allowed`` (--resume or --overwrite). Every rank
    looks before any writes (the sum is a collective), so no rank sees this run's own files."""
    held = [name for name in ("checkpoint.pt", "metrics.jsonl") if os.path.exists(os.path.join(out, name))]
    if distributed.sum_over_ranks([0.0 if allowed else float(len(held))], info)[0]:
        if held == ["metrics.jsonl"]:   # a --synthetic run, or one stopped before its first save
            raise TrainError(f"--out {out} holds a run's log but no checkpoint (metrics.jsonl of a --synthetic run "
                             "or of one stopped before its first checkpoint): nothing to resume; pass --overwrite "
                             "to start afresh there, or another --out")
        held = held or ["checkpoint.pt or metrics.jsonl, seen by another rank"]
        raise TrainError(f"--out {out} already holds a run ({', '.join(held)}): pass --resume to continue it, "
                         "--overwrite to start afresh there, or another --out")


def synthetic_targets(task, cfg: TrainConfig) -> tuple:
    """(criterion, per_pixel) of the synthetic measurement: a segmentation run's own, else
    classification's (its random labels stand in for any per-image target)."""
    return (task.criterion(cfg), True) if task.kind == SEGMENTATION else (None, False)


def validated(raw: nn.Module, runner: StepRunner, loader, amp, info: DistInfo, task, cfg: TrainConfig) -> dict:
    """The model's validation, and its EMA's (timm's --model-ema) as ``ema_*`` keys."""
    record = validate(raw, loader, amp, info, task, cfg)
    if runner.ema is not None:
        record.update({f"ema_{k}": v for k, v in validate(runner.ema.module, loader, amp, info, task, cfg).items()})
    return record


def train(cfg: TrainConfig, env=None) -> TrainResult:
    """Train as ``cfg`` says, in this process or as one rank of a torchrun job (from ``env``,
    by default the process environment)."""
    with failures.sigterm_raises():
        try:
            info = distributed.init(cfg.device, env, cfg.timeout)
            try:
                trainer = Trainer(cfg, info)
            except BaseException:
                with failures.sigterm_ignored():
                    distributed.cleanup(info)
                raise
        except failures.Terminated:
            raise TrainError("stopped by SIGTERM while starting; nothing was trained or saved") from None
        try:
            return trainer.run()
        finally:
            with failures.sigterm_ignored():
                distributed.cleanup(info)
