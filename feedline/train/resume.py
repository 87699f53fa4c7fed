"""A run's checkpoints: what one holds, saving it, and continuing a run from one exactly.

A checkpoint holds everything the next step depends on: weights, optimizer momentum,
the schedule's step, the gradient scaler, where the loader stands in the epoch (every
rank's ``state_dict``), the epoch's loss so far, and the RNG state. The data order and crops
are functions of (seed, epoch, index), so a resumed run sees the batches an
uninterrupted one would have seen next. On another number of ranks, the loaders deal the
records of the epoch that no rank trained on, and the step count and the schedule become
this run's: the resumed epoch ends where this run's epochs end.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from . import checkpoint
from .config import TrainConfig, TrainError
from .distributed import DistInfo, gather_objects, sum_over_ranks
from .loop import Progress
from .recipe_options import RecipeOptions
from .report import Reporter
from .step import StepRunner

# What a resumed run must share with the run that saved: else the schedule, the data
# order or the meaning of a step would differ. The value: what a checkpoint written before
# the option existed meant (a recipe option's default; the evaluation size changes no step).
_SAME = {"arch": None, "batch_size": None, "accum_steps": None, "seed": None, "epochs": None,
         "order": "random", "opt": "sgd", "sched": "cosine", "model_ema": False,
         **{f.name: f.default for f in dataclasses.fields(RecipeOptions) if f.name not in ("eval_size", "crop_pct")}}


class Checkpoints:
    """Saves the run's state (collective when distributed: the epoch's loss is summed over
    ranks; only rank 0 writes) and restores it. ``saved``: the (epoch, step) of the newest
    checkpoint this process wrote completely or resumed from (None on the other ranks until
    a resume: they cannot know whether rank 0's latest write finished)."""

    def __init__(self, cfg: TrainConfig, info: DistInfo, reporter: Reporter, num_classes: int,
                 steps_per_epoch: int, records: int):
        self.cfg, self.info, self.reporter = cfg, info, reporter
        self.num_classes, self.steps_per_epoch, self.records = num_classes, steps_per_epoch, records
        self.path = cfg.checkpoint_path
        self.saved: tuple[int, int] | None = None
        self.begun = False  # a checkpoint exists or is being written: resumed, or a save started
        if info.is_main:
            checkpoint.remove_stale_temporaries(self.path)

    def save(self, raw: nn.Module, runner: StepRunner, progress: Progress, loader_state: dict | None,
             history: list[dict]) -> None:
        """``loader_state``: this rank's (every rank's are gathered: collective), or None at an
        epoch boundary (``progress`` already at the next epoch)."""
        loss_sum, samples = sum_over_ranks([progress.loss_sum, progress.samples], self.info)
        loaders = gather_objects(loader_state, self.info) if loader_state is not None else None
        self.begun = True
        if not self.info.is_main:
            return
        # Each rank restores 1/world of the epoch's totals, so their sum stays right.
        world = self.info.world_size
        saved = dataclasses.replace(progress, loss_sum=loss_sum / world, samples=int(samples) // world)
        state = {
            "format": checkpoint.CHECKPOINT_FORMAT, "version": checkpoint.CHECKPOINT_VERSION,
            "config": self.cfg.to_dict(), "num_classes": self.num_classes, "world_size": world,
            "train_records": self.records,
            "steps_per_epoch": self.steps_per_epoch, "model": raw.state_dict(),
            "optimizer": runner.optimizer.state_dict(), "scheduler": runner.scheduler.state_dict(),
            "scaler": runner.scaler.state_dict() if runner.scaler is not None else None,
            "model_ema": runner.ema.state_dict() if runner.ema is not None else None,
            "progress": dataclasses.asdict(saved), "loader": loaders, "rng": _rng_state(),
            "history": history,
        }
        checkpoint.save(state, self.path)
        self.saved = (progress.epoch, progress.step)
        # epoch: counted from 1, as in the log; the one a resume continues in
        self.reporter.event("checkpoint", path=self.path, epoch=progress.epoch + 1, step=progress.step,
                            mid_epoch=loader_state is not None)

    def check(self, state: dict) -> None:
        """TrainError when ``state`` cannot continue this run, naming what differs."""
        where, saved = self.cfg.resume_path, dict(state.get("config", {}))
        if "warmup_lr" not in saved and saved.get("opt", "sgd") == "sgd":   # written when sgd had no Nesterov
            saved["opt"] = "momentum"
        for key, before in _SAME.items():
            if saved.get(key, before) != getattr(self.cfg, key):
                raise TrainError(f"{where} was written with --{key.replace('_', '-')} {saved.get(key, before)}, "
                                 f"this run has {getattr(self.cfg, key)}; resume with the same options")
        if state.get("num_classes") != self.num_classes:
            raise TrainError(f"{where} has {state.get('num_classes')} classes, the data "
                             f"{self.num_classes}; resume on the same data set")
        if state.get("train_records", self.records) != self.records:
            raise TrainError(f"{where} was trained on {state.get('train_records')} images, the data has "
                             f"{self.records}; resume on the same data set")
        if state.get("world_size") != self.info.world_size:
            if "train_records" not in state or isinstance(state.get("loader"), dict):
                raise TrainError(f"{where} was written by {state.get('world_size')} ranks without every rank's loader "
                                 f"position (an older feedline), this run has {self.info.world_size}; resume with "
                                 "the same number of processes")
        elif state.get("steps_per_epoch") != self.steps_per_epoch:
            raise TrainError(f"{where}: {state.get('steps_per_epoch')} steps per epoch, this run "
                             f"{self.steps_per_epoch}; resume on the same data set")

    def restore_model(self, state: dict, raw: nn.Module) -> None:
        """Check ``state`` against this run and load its weights (before DDP wraps the model)."""
        self.check(state)
        raw.load_state_dict(state["model"])

    def restore_training(self, state: dict, runner: StepRunner, loader) -> Progress:
        """Put the optimizer, schedule, scaler, RNG and the training ``loader`` back; returns
        where the run stands."""
        other_world = state["world_size"] != self.info.world_size
        runner.optimizer.load_state_dict(state["optimizer"])
        if not other_world:   # else this run's schedule, at the step _rescale finds
            runner.scheduler.load_state_dict(state["scheduler"])
        if runner.scaler is not None and state.get("scaler"):
            runner.scaler.load_state_dict(state["scaler"])
        if runner.ema is not None and state.get("model_ema"):
            runner.ema.load_state_dict(state["model_ema"])
        _set_rng_state(state["rng"])
        progress = Progress(**state["progress"])
        if state["loader"] is not None:   # mid-epoch: the loader continues where the ranks stood
            try:
                loader.load_state_dict(state["loader"])
            except ValueError as exc:
                raise TrainError(f"{self.cfg.resume_path}: {exc}") from None
        if other_world:
            micro = len(loader) - loader.batches_left() if state["loader"] is not None else 0
            self._rescale(progress, state["world_size"], runner, micro, len(loader))
        self.saved, self.begun = (progress.epoch, progress.step), True
        return progress

    def _rescale(self, progress: Progress, saved_world: int, runner: StepRunner, micro: int, total: int) -> None:
        """``progress`` in this run's ranks: ``micro`` of the epoch's batches count as done
        (the rest are what the loader deals), the step and the schedule are this run's (the
        resumed epoch ends at a multiple of this run's steps per epoch), and each rank holds
        its share of the epoch's loss sums."""
        world = self.info.world_size
        progress.micro = micro
        progress.step = progress.epoch * self.steps_per_epoch + micro // self.cfg.accum_steps
        samples = progress.samples * saved_world   # the epoch's, over the saved ranks: shared out again
        progress.loss_sum = progress.loss_sum * saved_world / world
        progress.samples = samples // world + int(self.info.rank < samples % world)
        runner.scheduler.load_state_dict({**runner.scheduler.state_dict(), "step_count": progress.step})
        self.reporter.info("resumed on %d ranks from a checkpoint of %d: epoch %d continues from batch %d of %d "
                           "(the records no rank trained on), at step %d of this run's schedule", world, saved_world,
                           progress.epoch + 1, micro, total, progress.step)

    def resume_hint(self) -> str:
        """What a run that stops now can continue from, for its last words."""
        if self.saved is not None and self.info.is_main:
            epoch, step = self.saved
            return (f"the last checkpoint, {self.path} (epoch {epoch + 1}, step {step}), is whole: run the "
                    "same command again with --resume to continue from it")
        if self.begun:
            return (f"the last checkpoint rank 0 finished, {self.path}, is whole: run the same command "
                    "again with --resume to continue from it")
        return (f"no checkpoint was saved by this run yet ({self.path} is written after each epoch, and "
                "every --save-every steps): run the same command again with --overwrite to start afresh")


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
