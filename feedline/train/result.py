"""What a run returns, and its closing summary (the last line of metrics.jsonl)."""
from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from . import distributed
from .distributed import DistInfo
from .report import Reporter


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
    bad_records: int = 0                         # substituted records, all ranks, all epochs of this run
    checkpoint: str | None = None
    metrics: str | None = None

    @property
    def pipeline_share(self) -> float | None:
        """real / synthetic: the share of the model's speed the data pipeline delivers."""
        if not self.real_images_per_s or not self.synthetic_images_per_s:
            return None
        return self.real_images_per_s / self.synthetic_images_per_s


def finish(result: TrainResult, raw: nn.Module, info: DistInfo, reporter: Reporter) -> None:
    """Steps per rank, whether the ranks ended with the same weights, the summary event.
    Collective when distributed: every rank must call it."""
    result.steps_per_rank = [row[0] for row in distributed.gather_ints([result.steps], info)]
    if info.distributed:
        result.ranks_in_sync = distributed.parameters_in_sync(raw, info)
        if not result.ranks_in_sync:
            reporter.warning("parameters differ between ranks at the end of the run")
    if result.pipeline_share is not None:
        # On the CPU the loader's workers and the model share the cores: the share then
        # says what feeding costs this CPU's model, not whether a GPU would wait for data.
        caveat = ("; on the CPU the loader's workers and the model share the same cores, so this is the "
                  "cost of decoding here, not a sign that a GPU would wait for data"
                  if info.device.type == "cpu" else "")
        reporter.info("data pipeline delivers %.0f%% of the model's speed: %s img/s training vs %s img/s "
                      "on synthetic data (per rank)%s", 100 * result.pipeline_share,
                      f"{result.real_images_per_s:,.0f}", f"{result.synthetic_images_per_s:,.0f}", caveat)
    reporter.event("summary", steps=result.steps, epochs_done=result.epochs_done,
                   stopped_early=result.stopped_early, steps_per_rank=result.steps_per_rank,
                   ranks_in_sync=result.ranks_in_sync, real_images_per_s=result.real_images_per_s,
                   synthetic_images_per_s=result.synthetic_images_per_s,
                   pipeline_share=result.pipeline_share, bad_records=result.bad_records,
                   checkpoint=result.checkpoint, final=result.history[-1] if result.history else None)
