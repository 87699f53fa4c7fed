"""The recipe of bench/augment.py written as a DataLoader + PIL user runs it: torchvision's
RandAugment on the PIL image (its _apply_op with PIL, NEAREST, fill 0), RandomErasing on the
normalized tensor, both in the workers, timm's Mixup (0.8 / CutMix 1.0) on the collated batch
in the main process; each part can be left out, to price it alone.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from bench.baselines import PilFolderDataset
from bench.streams import LoaderStream, forever, plain_stream

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

    def __init__(self, root: str, randaugment: bool = True, erasing: bool = True):
        super().__init__(root)
        self.randaugment, self.erasing = randaugment, erasing

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
        if self.randaugment:
            image = pil_randaugment(image)
        x = torch.from_numpy(np.array(image, np.uint8, copy=True)).permute(2, 0, 1).float().div_(255)
        x = x.sub_(self.mean).div_(self.std)
        return (erase_tensor(x) if self.erasing else x), label


def recipe_dataloader_stream(folder: str, batch_size: int, workers: int, classes: int, randaugment: bool = True,
                             erasing: bool = True, mixup: bool = True) -> LoaderStream:
    loader = torch.utils.data.DataLoader(RecipeDataset(folder, randaugment, erasing), batch_size=batch_size,
                                         shuffle=True, num_workers=workers, drop_last=True,
                                         persistent_workers=workers > 0)

    def mixed():
        for x, y in forever(lambda: loader):
            yield timm_mixup(x, y, classes) if mixup else (x, y)
    return plain_stream(mixed(), "cpu")
