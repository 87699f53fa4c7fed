"""The augmentation recipe of issue 20, side by side: RandomResizedCrop 224 + flip +
RandAugment(2, 9) + RandomErasing(0.25) + MixUp/CutMix (timm's Mixup(0.8, 1.0)).

Rows, measured in one run:
- ``dataloader``: torch DataLoader + PIL doing crop + flip only (bench.baselines).
- ``dataloader+recipe``: the same + the recipe written with PIL and torch as torchvision and
  timm do it: RandAugment on the PIL image, RandomErasing on the normalized tensor, both in
  the workers; Mixup on the collated batch in the main process.
- ``feedloader`` / ``feedloader+recipe``: FeedLoader without and with ``transforms=`` /
  ``batch_transforms=`` (the recipe on the decode threads, the mixer on the consumer's).
- ``ops:pil`` / ``ops:feedline``: the recipe's per-sample ops alone on 224 x 224 photos in
  this process on one thread (PIL as above vs feedline.transforms' numpy/OpenCV path).

Targets: feedloader+recipe over dataloader+recipe >= 3x; the recipe's cost for FeedLoader
(feedloader+recipe over feedloader) is reported. --quick writes under bench/results/quick and
judges nothing; --save writes the committed bench/results/augment.json.

Usage: python bench/augment.py [DATA] [--quick | --save] [--n N] [--batches B] [--seconds S] [--workers W]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.baselines import PilFolderDataset, dataloader_stream, feedloader_stream  # noqa: E402
from bench.args import check_output_flags, output_arguments  # noqa: E402
from bench.common import format_table, ratio, target, targets_table, write_results  # noqa: E402
from bench.data import prepare_data  # noqa: E402
from bench.streams import LoaderStream, forever, measure, plain_stream  # noqa: E402

RA_OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
          "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]


# -- the recipe with PIL and torch, as torchvision and timm run it ---------------------
def pil_randaugment(image, num_ops: int = 2, magnitude: int = 9, bins: int = 31):
    """torchvision's RandAugment on a PIL image (its _apply_op, NEAREST, fill 0)."""
    from PIL import Image, ImageEnhance, ImageOps
    w, h = image.size
    for _ in range(num_ops):
        op = RA_OPS[int(torch.randint(len(RA_OPS), (1,)))]
        top = {"ShearX": 0.3, "ShearY": 0.3, "TranslateX": 150 / 331 * w, "TranslateY": 150 / 331 * h,
               "Rotate": 30.0, "Brightness": 0.9, "Color": 0.9, "Contrast": 0.9, "Sharpness": 0.9}
        m = top.get(op, 0.0) * magnitude / (bins - 1)
        if op in top and torch.randint(2, (1,)):
            m = -m
        if op in ("ShearX", "ShearY", "TranslateX", "TranslateY"):
            matrix = {"ShearX": (1, m, 0, 0, 1, 0), "ShearY": (1, 0, 0, m, 1, 0),
                      "TranslateX": (1, 0, -int(m), 0, 1, 0), "TranslateY": (1, 0, 0, 0, 1, -int(m))}[op]
            image = image.transform(image.size, Image.AFFINE, matrix, Image.NEAREST, fillcolor=(0, 0, 0))
        elif op == "Rotate":
            image = image.rotate(m, Image.NEAREST, fillcolor=(0, 0, 0))
        elif op in ("Brightness", "Color", "Contrast", "Sharpness"):
            image = getattr(ImageEnhance, op)(image).enhance(1 + m)
        elif op == "Posterize":
            image = ImageOps.posterize(image, int(8 - round(magnitude / ((bins - 1) / 4))))
        elif op == "Solarize":
            image = ImageOps.solarize(image, 255.0 - 255.0 * magnitude / (bins - 1))
        elif op in ("AutoContrast", "Equalize"):
            image = getattr(ImageOps, op.lower())(image)
    return image


def erase_tensor(x: torch.Tensor, p: float = 0.25, scale=(0.02, 0.33), ratio_=(0.3, 3.3)):
    """torchvision's RandomErasing(p, value=0) on a C x H x W tensor."""
    if torch.rand(1) >= p:
        return x
    _, h, w = x.shape
    for _ in range(10):
        area = h * w * torch.empty(1).uniform_(*scale).item()
        aspect = math.exp(torch.empty(1).uniform_(math.log(ratio_[0]), math.log(ratio_[1])).item())
        eh, ew = int(round(math.sqrt(area * aspect))), int(round(math.sqrt(area / aspect)))
        if eh < h and ew < w:
            i, j = int(torch.randint(0, h - eh + 1, (1,))), int(torch.randint(0, w - ew + 1, (1,)))
            x[:, i:i + eh, j:j + ew] = 0
            return x
    return x


def timm_mixup(x: torch.Tensor, y: torch.Tensor, classes: int, smoothing: float = 0.1):
    """timm's Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5), mode 'batch'."""
    cut = np.random.rand() < 0.5
    lam = float(np.random.beta(1.0, 1.0) if cut else np.random.beta(0.8, 0.8))
    if cut:
        h, w = x.shape[-2:]
        r = math.sqrt(1 - lam)
        ch, cw = int(h * r), int(w * r)
        cy, cx = np.random.randint(h), np.random.randint(w)
        y0, y1, x0, x1 = (np.clip(cy - ch // 2, 0, h), np.clip(cy + ch // 2, 0, h),
                          np.clip(cx - cw // 2, 0, w), np.clip(cx + cw // 2, 0, w))
        x[:, :, y0:y1, x0:x1] = x.flip(0)[:, :, y0:y1, x0:x1]
        lam = 1 - (y1 - y0) * (x1 - x0) / (h * w)
    else:
        x = x * lam + x.flip(0) * (1 - lam)
    off = smoothing / classes
    onehot = torch.full((len(y), classes), off).scatter_(1, y[:, None], 1 - smoothing + off)
    return x, onehot * lam + onehot.flip(0) * (1 - lam)


class RecipeDataset(PilFolderDataset):
    """bench.baselines' crop + flip + normalize, with RandAugment before ToTensor and
    RandomErasing after Normalize, as a timm/torchvision training script orders them."""

    def __getitem__(self, index: int):
        from PIL import Image
        from bench.baselines import rrc_params
        path, label = self.samples[index]
        with open(path, "rb") as fh:
            image = Image.open(fh).convert("RGB")
        top, left, h, w = rrc_params(image.height, image.width)
        image = image.crop((left, top, left + w, top + h)).resize((self.size, self.size), Image.Resampling.BILINEAR)
        if torch.rand(1) < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        image = pil_randaugment(image)
        x = torch.from_numpy(np.array(image, np.uint8, copy=True)).permute(2, 0, 1).float().div_(255)
        return erase_tensor(x.sub_(self.mean).div_(self.std)), label


def recipe_dataloader_stream(folder: str, batch_size: int, workers: int, classes: int) -> LoaderStream:
    loader = torch.utils.data.DataLoader(RecipeDataset(folder), batch_size=batch_size, shuffle=True,
                                         num_workers=workers, drop_last=True, persistent_workers=workers > 0)

    def mixed():
        for x, y in forever(lambda: loader):
            yield timm_mixup(x, y, classes)
    return plain_stream(mixed(), "cpu")


def feedloader_recipe_stream(packed: str, batch_size: int, threads: int, classes: int):
    """FeedLoader with the recipe: the per-sample ops on the decode threads, the mixer here."""
    from feedline.config import TransformSpec
    from feedline.loader import FeedLoader
    from feedline.transforms import Mixup, RandAugment, RandomErasing
    loader = FeedLoader(packed, batch_size=batch_size, shuffle=True, train=True, size=224, num_workers=threads,
                        device="cpu", drop_last=True,
                        transforms=TransformSpec([RandAugment(2, 9), RandomErasing(0.25)],
                                                 [Mixup(0.8, 1.0, num_classes=classes)]))
    stream = plain_stream(forever(lambda: loader), "cpu")
    close_stream = stream.close

    def close():
        close_stream()
        loader.close()
    stream.close = close
    return stream, None


# -- the ops alone, one thread -----------------------------------------------------------
def ops_rates(images: list[np.ndarray], seconds: float) -> dict:
    from PIL import Image
    from feedline.transforms import RandAugment, RandomErasing, SampleTransforms
    ops = SampleTransforms([RandAugment(2, 9), RandomErasing(0.25)])
    mean, std = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1), torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def pil(i):
        x = torch.from_numpy(np.array(pil_randaugment(Image.fromarray(images[i % len(images)])))).permute(2, 0, 1)
        erase_tensor(x.float().div_(255).sub_(mean).div_(std))

    drawn = {}

    def ours(i):  # as an engine does: parameters drawn once per batch of 64, applied per sample
        if i % 64 == 0:
            drawn["batch"] = ops.draw(0, 0, np.arange(i, i + 64))
        ops.apply_drawn(images[i % len(images)], drawn["batch"], i % 64, 0, 0, i)
    out = {}
    for name, fn in (("ops:pil", pil), ("ops:feedline", ours)):
        count, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn(count)
            count += 1
        out[name] = count / (time.perf_counter() - t0)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/augment.py", description=__doc__.split("\n\n")[0])
    p.add_argument("data", nargs="?")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=int, default=None, help="images generated without DATA (default 2000)")
    p.add_argument("--batches", type=int, default=None, help="timed batches per loader (default 30)")
    p.add_argument("--batch-size", type=int, default=None, help="default 64")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers and FeedLoader threads")
    p.add_argument("--seconds", type=float, default=None, help="seconds per ops row (default 5)")
    p.add_argument("--repeats", type=int, default=None, help="rounds over the loader rows, interleaved; "
                   "each row's median is kept (default 3; 1 with --quick)")
    output_arguments(p, "augment")
    a = p.parse_args(argv)
    check_output_flags(p, a)
    batches, batch_size = a.batches or (3 if a.quick else 30), a.batch_size or (8 if a.quick else 64)
    seconds = a.seconds or (0.5 if a.quick else 5.0)
    torch.set_num_threads(1)
    data = prepare_data(a.data, n=a.n or (64 if a.quick else 2000))
    from feedline.stores import open_dataset
    with open_dataset(data.packed) as store:
        classes = int(np.max(store.labels)) + 1
    repeats = a.repeats or (1 if a.quick else 3)
    makers = {"dataloader": lambda: (dataloader_stream(str(data.folder), batch_size, a.workers, "cpu"), None),
              "dataloader+recipe": lambda: (recipe_dataloader_stream(str(data.folder), batch_size, a.workers,
                                                                     classes), None),
              "feedloader": lambda: (feedloader_stream(str(data.packed), batch_size, a.workers, "cpu"), None),
              "feedloader+recipe": lambda: feedloader_recipe_stream(str(data.packed), batch_size, a.workers,
                                                                    classes)}
    measured: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(repeats):   # rounds over the rows: a slow spell of a shared machine hits every row
        for name, make in makers.items():
            stream, _ = make()
            try:
                for _ in range(2):
                    next(stream.batches)
                m = measure(stream.batches, batches, 2, "cpu")
            finally:
                stream.close()
            measured[name].append(m["images"] / m["seconds"])
    rows = [{"name": name, "img_s": float(np.median(v)), "runs": v, "reason": ""} for name, v in measured.items()]
    photos = [np.asarray(_photo(i)) for i in range(8)]
    rows += [{"name": k, "img_s": v, "reason": "one thread, 224 x 224, no decode"}
             for k, v in ops_rates(photos, seconds).items()]
    by = {r["name"]: r["img_s"] for r in rows}
    for r in rows:
        base = {"dataloader+recipe": "dataloader", "feedloader+recipe": "feedloader",
                "ops:feedline": "ops:pil"}.get(r["name"])
        r["vs"] = base or ""
        r["ratio"] = ratio(r["img_s"], by.get(base)) if base else None
    print(format_table(rows, [("row", "name"), ("img/s", "img_s"), ("vs", "vs"), ("ratio", "ratio"),
                              ("note", "reason")]))
    targets = [target("feedloader+recipe over dataloader+recipe", ratio(by["feedloader+recipe"],
                                                                         by["dataloader+recipe"]), 3.0)]
    kept = ratio(by["feedloader+recipe"], by["feedloader"])
    print(targets_table(targets, quick=a.quick))
    print(f"the recipe keeps {kept:.2f} of FeedLoader's crop + flip throughput" if kept else "")
    path = write_results("augment", rows, params={"batches": batches, "batch_size": batch_size, "repeats": repeats,
                                                  "workers": a.workers, "data": data.to_dict()}, out=a.out,
                         quick=a.quick, save=a.save, targets=targets, recipe_kept=kept)
    print(f"wrote {path}")
    return 0


def _photo(i: int):
    import cv2
    from feedline.sample import photo_paths
    img = cv2.cvtColor(cv2.imread(photo_paths()[i % len(photo_paths())], cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return cv2.resize(img, (224, 224), interpolation=cv2.INTER_AREA)


if __name__ == "__main__":
    sys.exit(main())
