"""`feedline show STORE`: one batch as the loader delivers it, written as a PNG grid with its
targets drawn (feedline/dataset/show.py). The loader's options are FeedLoader's (--train, --size,
--batch-size, --seed, --epoch) and the trainer's recipe flags with timm's names (--aa,
--color-jitter, --reprob, --mixup, --cutmix, ...), so the picture is the trainer's batch."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..core.errors import FeedlineError
from ..core.flags import add_dataclass_arguments, config_from_args
from ..train.errors import TrainError
from ..train.recipe_options import RecipeOptions

LOADER = "the batch"


def _option(default, help: str, **cli):
    return field(default=default, metadata={"help": help, "group": LOADER, **cli})


@dataclass
class ShowConfig(RecipeOptions):
    """What to show: STORE's batch ``batch`` of epoch ``epoch``, loaded as the trainer loads it
    with ``train`` (shuffled, augmented), else as an evaluation loader (in order, center crops)."""

    store: str = _option(None, "a packed .lmdb/.h5 file, shard index or image folder", positional=True,
                         metavar="STORE")
    out: str = _option("batch.png", "the PNG to write", metavar="PNG")
    train: bool = _option(False, "a training batch: shuffled, RandomResizedCrop and flip, and the recipe "
                          "below (the trainer's); otherwise resize and center crop, in order")
    size: int = _option(224, "the crop's size (FeedLoader's size=, the trainer's --size)", metavar="PX")
    batch_size: int = _option(16, "images in the batch (and the grid)", metavar="N", aliases=("-b",))
    epoch: int = _option(0, "the epoch whose order, crops and augmentations are drawn", metavar="E")
    batch: int = _option(0, "which batch of the epoch", metavar="B")
    seed: int = _option(0, "the loader's seed (the trainer's --seed)")
    columns: int | None = _option(None, "images per row of the grid", metavar="N",
                                  default_text="the square root of --batch-size")
    label_smoothing: float = _option(0.1, "--mixup/--cutmix targets' smoothing (the trainer's)",
                                     aliases=("--smoothing",))
    annotate: bool = _option(True, "draw the targets (class names, boxes, keypoints, masks)")

    def __post_init__(self) -> None:
        try:
            self._check_recipe()
        except TrainError as exc:
            raise FeedlineError(str(exc)) from None
        for name in ("size", "batch_size"):
            if getattr(self, name) < 1:
                raise FeedlineError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("epoch", "batch"):
            if getattr(self, name) < 0:
                raise FeedlineError(f"--{name} must not be negative, got {getattr(self, name)}")
        if not self.train:
            changed = [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(RecipeOptions)
                       if f.name not in ("eval_size", "crop_pct", "color_jitter")
                       and getattr(self, f.name) != f.default]
            if changed:
                raise FeedlineError(f"{', '.join(changed)} shape training batches: pass --train to see them")


def register(subparsers) -> None:
    p = subparsers.add_parser("show", help="write one batch as a PNG grid with its targets drawn",
                              description="Load one batch of STORE as FeedLoader delivers it (with --train, "
                                          "as `feedline train` loads it, its recipe flags included) and write "
                                          "it as a PNG grid: the images un-normalized, each with its class "
                                          "names, boxes and keypoints drawn.")
    add_dataclass_arguments(p, ShowConfig)
    p.set_defaults(func=run)


def run(args) -> int:
    cfg = config_from_args(ShowConfig, args)
    from ..dataset.show import batch_picture
    images, targets, store, output = one_batch(cfg)
    picture = batch_picture(images, targets, fields=store.fields, class_lists=store.class_lists,
                            mean=output.mean, std=output.std, columns=cfg.columns, annotate=cfg.annotate)
    picture.save(cfg.out, format="PNG")
    print(f"wrote {cfg.out}: {len(images)} images of {store.filename} (epoch {cfg.epoch}, batch {cfg.batch}"
          f"{', training' if cfg.train else ''}), {picture.width}x{picture.height} pixels")
    return 0


def one_batch(cfg: ShowConfig):
    """Batch ``cfg.batch`` of epoch ``cfg.epoch``, on the CPU: (images, targets, store, OutputSpec)."""
    import itertools

    from ..loading.loader import FeedLoader
    from ..stores import open_dataset
    from ..train.recipe import loader_options
    store = open_dataset(cfg.store)
    options = loader_options(cfg, cfg.train, len(store.classes) or None)
    with FeedLoader(store, batch_size=cfg.batch_size, shuffle=cfg.train, **({"train": True} if cfg.train else {}),
                    device="cpu", num_workers=0, seed=cfg.seed, **options) as loader:
        if cfg.batch >= len(loader):
            raise FeedlineError(f"--batch {cfg.batch}: an epoch of {store.filename} has {len(loader)} batch(es) of "
                                f"{cfg.batch_size}; pick one below {len(loader)}")
        loader.set_epoch(cfg.epoch)
        images, targets = next(itertools.islice(iter(loader), cfg.batch, None))
        return images.clone(), clone(targets), store, loader.config.output


def clone(targets):
    """The targets out of the loader's reused buffers."""
    return {k: v.clone() for k, v in targets.items()} if isinstance(targets, dict) else targets.clone()
