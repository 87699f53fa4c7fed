"""Rank 0's reports: log lines, a JSON-lines log (OUT/metrics.jsonl) and a progress bar."""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
import time

from .loop import Window

log = logging.getLogger("feedline.train")


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass


class Reporter:
    """Writes only on the main rank; every method is a no-op elsewhere, so callers need
    no rank checks. ``metrics.jsonl`` is appended to on a resume and started afresh otherwise."""

    def __init__(self, out: str, enabled: bool, world_size: int, progress: bool | None,
                 append: bool):
        self.enabled = enabled
        self.world_size = world_size
        self.show_bar = enabled and (sys.stderr.isatty() if progress is None else progress)
        self.path = os.path.join(out, "metrics.jsonl")
        self._fh = None
        self._bar = _NoBar()
        if enabled:
            os.makedirs(out, exist_ok=True)
            self._fh = open(self.path, "a" if append else "w", encoding="utf-8")

    def event(self, kind: str, **fields) -> None:
        if self._fh is None:
            return
        record = _finite({"event": kind, "time": round(time.time(), 3), **fields})
        self._fh.write(json.dumps(record, default=str, allow_nan=False) + "\n")
        self._fh.flush()

    def info(self, msg: str, *args) -> None:
        if self.enabled:
            log.info(msg, *args)

    def warning(self, msg: str, *args) -> None:
        if self.enabled:
            log.warning(msg, *args)

    @contextlib.contextmanager
    def bar(self, total: int, initial: int, desc: str):
        """A tqdm bar over the micro-steps of an epoch while log lines go above it."""
        if not self.show_bar:
            yield _NoBar()
            return
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm
        with logging_redirect_tqdm(), tqdm(total=total, initial=initial, desc=desc, unit="batch",
                                            dynamic_ncols=True, leave=False) as bar:
            self._bar = bar
            try:
                yield bar
            finally:
                self._bar = _NoBar()

    def start(self, cfg, info, amp: str, images: int, num_classes: int, lr: float, steps_per_epoch: int,
              total_steps: int, warmup_steps: int, resumed=None) -> None:
        """The run's first log line (what it trains on; the optimizer, the schedule with its warmup,
        the autocast dtype) and its "start" event (``resumed``: the Progress resumed at)."""
        self.info("training %s on %s: %d classes, %d images, %d rank(s) on %s, global batch %d, %d steps/epoch, "
                  "%d epochs; %s; %s; autocast %s%s", cfg.arch, cfg.train, num_classes, images, info.world_size,
                  info.device, cfg.batch_size * cfg.accum_steps * info.world_size, steps_per_epoch, cfg.run_epochs,
                  optimizer_text(cfg), schedule_text(cfg, lr, warmup_steps), AUTOCAST_TEXT[amp],
                  f"; resumed in epoch {resumed.epoch + 1}, step {resumed.step}" if resumed else "")
        self.event("start", config=cfg.to_dict(), world_size=info.world_size, device=str(info.device),
                   amp=amp, lr=lr, steps_per_epoch=steps_per_epoch, total_steps=total_steps,
                   warmup_steps=warmup_steps, num_classes=num_classes,
                   resumed_at={"epoch": resumed.epoch + 1, "step": resumed.step} if resumed else None)

    def epoch(self, record: dict, epochs: int, bad_records) -> None:
        """The end-of-epoch line and event; ``bad_records`` (this rank's) as their own event."""
        val = f" | val loss {record['val_loss']:.4f}, {scores(record)}" if "val_loss" in record else ""
        if "ema_val_loss" in record:   # timm's --model-ema, validated beside the model
            val += f" | EMA val loss {record['ema_val_loss']:.4f}, {scores(record, 'ema_')}"
        bad = f", {record['bad_records']} bad record(s) substituted" if record.get("bad_records") else ""
        self.info("epoch %d/%d (size %s): train loss %.4f%s | %s img/s, data wait %.0f%%, %.1f s%s",
                  record["epoch"], epochs, _size(record["size"]), record["train_loss"], val,
                  f"{record['images_per_s']:,.0f}",
                  100 * record["data_wait"], record["epoch_s"], bad)
        self.event("epoch", **record)
        if bad_records:
            self.event("bad_records", epoch=record["epoch"], rank=0, records=[
                {"index": r.index, "path": r.path, "reason": r.reason, "substitute": r.substitute}
                for r in bad_records])

    def window(self, w: Window, size: tuple[int, int]) -> None:
        """One log line every --log-every optimizer steps, whether stderr is a terminal or a file;
        ``size``: the epoch's training crop (it changes under a size schedule)."""
        if not self.enabled:
            return
        images_per_s = w.images_per_s * self.world_size
        mem = f", GPU memory {w.gpu_mem_gib:.1f} GiB peak" if w.gpu_mem_gib is not None else ""
        self._bar.set_postfix_str(f"loss {w.loss:.3f}, {images_per_s:,.0f} img/s, wait {w.data_wait:.0%}")
        log.info("epoch %d step %d [%d/%d] size %s loss %.4f lr %.4g | %s img/s, %.3f s/step, data wait %.0f%%%s",
                 w.epoch + 1, w.step, w.micro, w.micro_total, _size(size), w.loss, w.lr, f"{images_per_s:,.0f}",
                 w.step_s, 100 * w.data_wait, mem)
        self.event("step", epoch=w.epoch + 1, step=w.step, size=list(size), loss=w.loss, lr=w.lr,
                   images_per_s=images_per_s,
                   images_per_s_per_rank=w.images_per_s, step_s=w.step_s, data_wait=w.data_wait,
                   gpu_mem_gib=w.gpu_mem_gib)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


AUTOCAST_TEXT = {"bf16": "bf16", "fp16": "fp16 with a GradScaler", "off": "off (float32)"}


def optimizer_text(cfg) -> str:
    """"sgd (Nesterov momentum 0.9, weight decay 2e-05)", "adamw (weight decay 0.05)", ..."""
    nesterov = "Nesterov " if cfg.opt == "sgd" else ""   # timm's sgd (step.make_optimizer)
    momentum = f"{nesterov}momentum {cfg.momentum:g}, " if cfg.opt in ("sgd", "momentum") else ""
    clip = f", clip grad {cfg.clip_mode.value} {cfg.clip_grad:g}" if cfg.clip_grad is not None else ""
    return f"{cfg.opt.value} ({momentum}weight decay {cfg.weight_decay:g}{clip})"


def schedule_text(cfg, lr: float, warmup_steps: int) -> str:
    """"lr 0.1 after 5 warmup epochs (1,250 steps) from 1e-05, cosine to 0" and the others."""
    warmup = (f" after {cfg.warmup_epochs:g} warmup epoch(s) ({warmup_steps:,} steps) from {cfg.warmup_lr:g}"
              if warmup_steps else ", no warmup")
    decay = {"cosine": f"cosine to {cfg.min_lr:g}" + (f", then {cfg.cooldown_epochs} epoch(s) at it"
                                                       if cfg.cooldown_epochs else ""),
             "step": f"step x{cfg.decay_rate:g} every {cfg.decay_epochs:g} epochs",
             "multistep": f"x{cfg.decay_rate:g} at epochs {', '.join(map(str, cfg.decay_milestones))}"}
    return f"lr {lr:.4g}{warmup}, {decay[cfg.sched.value]}"


def scores(record: dict, prefix: str = "") -> str:
    """The validation scores of a record's model (``prefix`` "ema_": its EMA's): top-1 and top-5,
    mAP (multi-label), MAE (regression) or mIoU (segmentation; task.py)."""
    if f"{prefix}top1" in record:
        return f"top-1 {record[prefix + 'top1']:.1%}, top-5 {record[prefix + 'top5']:.1%}"
    if f"{prefix}mAP" in record:
        return f"mAP {record[prefix + 'mAP']:.1%}"
    if f"{prefix}mIoU" in record:
        return f"mIoU {record[prefix + 'mIoU']:.1%}, pixel accuracy {record[prefix + 'pixel_accuracy']:.1%}"
    return f"MAE {record[prefix + 'mae']:.4g}"


def _size(size) -> str:
    """160 for a square crop, 160x128 (height x width) otherwise."""
    height, width = size
    return str(height) if height == width else f"{height}x{width}"


def _finite(obj):
    """NaN and infinity (a diverged loss) as null: JSON has no spelling for them."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
