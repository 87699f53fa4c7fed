"""Independent references for feedline.transforms, never calling feedline: PIL's ImageEnhance,
ImageOps, Image.transform / rotate for the image ops (torchvision's PIL path calls exactly
these), scalar Python written from torchvision's and timm's source for the rest.

- ``enhance`` / ``tone`` / ``hue_pil`` / ``gray_pil``: torchvision's F_pil functions.
- ``affine_matrix``: torchvision's _get_inverse_affine_matrix; ``apply_op``: _apply_op.
- ``augmentation_space``: RandAugment's / TrivialAugmentWide's magnitude tables, with torch.
- ``gaussian_blur``: torchvision's kernel and reflected borders, summed tap by tap in numpy.
- ``erase_params``: RandomErasing.get_params, line by line, with given uniforms.
- ``mixup_target`` / ``rand_bbox`` / ``mix_batch``: timm.data.mixup, element by element.
- ``timm_mix`` / ``torchvision_mix``: timm's _mix_batch / _mix_elem / mixup_target and torchvision
  v2's MixUp / CutMix, their torch statements as written, to compare bit for bit.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageOps

OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
       "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]


def _pil(img: np.ndarray) -> Image.Image:
    return Image.fromarray(img)


def enhance(kind: str, img: np.ndarray, factor: float) -> np.ndarray:
    """ImageEnhance.Brightness / Color / Contrast / Sharpness(img).enhance(factor)."""
    return np.asarray(getattr(ImageEnhance, kind)(_pil(img)).enhance(factor))


def tone(kind: str, img: np.ndarray, arg=None) -> np.ndarray:
    """ImageOps.posterize(bits) / solarize(threshold) / autocontrast() / equalize()."""
    fn = getattr(ImageOps, kind)
    return np.asarray(fn(_pil(img)) if arg is None else fn(_pil(img), arg))


def hue_pil(img: np.ndarray, hue_factor: float) -> np.ndarray:
    """torchvision's F_pil.adjust_hue: uint8 HSV, the hue byte shifted with wrap-around."""
    h, s, v = _pil(img).convert("HSV").split()
    np_h = np.array(h, dtype=np.uint8)
    with np.errstate(over="ignore"):
        np_h += np.array(hue_factor * 255).astype(np.uint8)
    return np.asarray(Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB"))


def gray_pil(img: np.ndarray) -> np.ndarray:
    return np.repeat(np.asarray(_pil(img).convert("L"))[..., None], 3, axis=2)


def affine_matrix(center, angle, translate, scale, shear) -> list[float]:
    """torchvision.transforms.functional._get_inverse_affine_matrix."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [x / scale for x in [d, -b, 0.0, -c, a, 0.0]]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def _affine(img: np.ndarray, translate, shear, center, fill) -> np.ndarray:
    """torchvision's F.affine on a PIL image (angle 0, scale 1), nearest."""
    h, w = img.shape[:2]
    if center is None:
        center = [w * 0.5, h * 0.5]
    m = affine_matrix(center, 0.0, translate, 1.0, shear)
    out = _pil(img).transform((w, h), Image.AFFINE, m, Image.NEAREST, fillcolor=fill)
    return np.asarray(out)


def apply_op(img: np.ndarray, op: str, magnitude: float, fill=(0, 0, 0)) -> np.ndarray:
    """torchvision.transforms.autoaugment._apply_op on a PIL image (NEAREST)."""
    if op == "ShearX":
        return _affine(img, [0, 0], [math.degrees(math.atan(magnitude)), 0.0], [0, 0], fill)
    if op == "ShearY":
        return _affine(img, [0, 0], [0.0, math.degrees(math.atan(magnitude))], [0, 0], fill)
    if op == "TranslateX":
        return _affine(img, [int(magnitude), 0], [0.0, 0.0], None, fill)
    if op == "TranslateY":
        return _affine(img, [0, int(magnitude)], [0.0, 0.0], None, fill)
    if op == "Rotate":
        return np.asarray(_pil(img).rotate(magnitude, Image.NEAREST, expand=False, fillcolor=fill))
    if op in ("Brightness", "Color", "Contrast", "Sharpness"):
        return enhance(op, img, 1.0 + magnitude)
    if op == "Posterize":
        return tone("posterize", img, int(magnitude))
    if op == "Solarize":
        return tone("solarize", img, magnitude)
    if op in ("AutoContrast", "Equalize"):
        return tone(op.lower(), img)
    assert op == "Identity"
    return img


def augmentation_space(num_bins: int, image_size, wide: bool) -> dict:
    """RandAugment._augmentation_space (image_size = [width, height]) or, ``wide``,
    TrivialAugmentWide._augmentation_space: op -> (magnitudes, signed)."""
    top = (lambda ra, ta: torch.linspace(0.0, ta if wide else ra, num_bins))
    return {
        "Identity": (torch.tensor(0.0), False),
        "ShearX": (top(0.3, 0.99), True),
        "ShearY": (top(0.3, 0.99), True),
        "TranslateX": (top(150.0 / 331.0 * image_size[0], 32.0), True),
        "TranslateY": (top(150.0 / 331.0 * image_size[1], 32.0), True),
        "Rotate": (top(30.0, 135.0), True),
        "Brightness": (top(0.9, 0.99), True),
        "Color": (top(0.9, 0.99), True),
        "Contrast": (top(0.9, 0.99), True),
        "Sharpness": (top(0.9, 0.99), True),
        "Posterize": (8 - (torch.arange(num_bins) / ((num_bins - 1) / (6 if wide else 4))).round().int(), False),
        "Solarize": (torch.linspace(255.0, 0.0, num_bins), False),
        "AutoContrast": (torch.tensor(0.0), False),
        "Equalize": (torch.tensor(0.0), False),
    }


def gaussian_blur(img: np.ndarray, kernel_size, sigma: float) -> np.ndarray:
    """torchvision's gaussian_blur: kernel exp(-x^2 / 2 sigma^2) on linspace(-(k-1)/2, (k-1)/2, k),
    normalized; reflected borders; rows then columns, tap by tap; rounded."""
    def kernel(k):
        xs = [-(k - 1) / 2 + i for i in range(k)]
        pdf = [math.exp(-0.5 * (x / sigma) ** 2) for x in xs]
        return [p / sum(pdf) for p in pdf]

    kx, ky = kernel_size
    x = img.astype(np.float64)
    h, w = img.shape[:2]
    padded = np.pad(x, ((0, 0), (kx // 2, kx // 2), (0, 0)), mode="reflect")
    x = sum(wt * padded[:, t:t + w] for t, wt in enumerate(kernel(kx)))
    padded = np.pad(x, ((ky // 2, ky // 2), (0, 0), (0, 0)), mode="reflect")
    x = sum(wt * padded[t:t + h] for t, wt in enumerate(kernel(ky)))
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def erase_params(u: list[float], img_h: int, img_w: int, scale, ratio):
    """torchvision's RandomErasing.get_params with its draws from ``u``: 10 areas, 10 log
    ratios, then top and left. Returns (i, j, h, w), h = 0 when no try fits."""
    area = img_h * img_w
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for t in range(10):
        erase_area = area * (scale[0] + (scale[1] - scale[0]) * u[t])
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[10 + t])
        h = int(round(math.sqrt(erase_area * aspect_ratio)))
        w = int(round(math.sqrt(erase_area / aspect_ratio)))
        if not (h < img_h and w < img_w):
            continue
        return int(u[20] * (img_h - h + 1)), int(u[21] * (img_w - w + 1)), h, w
    return 0, 0, 0, 0


def mixup_target(target, num_classes: int, lam, smoothing: float, partner=None) -> np.ndarray:
    """timm 1.0.31's mixup_target with a per-sample ``lam`` list: int labels one-hot with
    off = eps / C and on = 1 - eps + eps / C; multi-hot rows (lists) smoothed toward 0.5 as
    multi_label=True, y * (1 - eps) + 0.5 * eps; then mixed with the partner's (timm: the
    flipped batch, n - 1 - i; ``partner`` gives another index, as torchvision's i - 1)."""
    n = len(target)
    partner = partner or (lambda i: n - 1 - i)

    def y(i, c):
        if isinstance(target[i], (list, tuple)):
            return target[i][c] * (1.0 - smoothing) + 0.5 * smoothing
        off = smoothing / num_classes
        return 1.0 - smoothing + off if target[i] == c else off

    out = np.zeros((n, num_classes))
    for i in range(n):
        for c in range(num_classes):
            out[i, c] = y(i, c) * lam[i] + y(partner(i), c) * (1.0 - lam[i])
    return out


def rand_bbox(img_h: int, img_w: int, lam: float, cy: int, cx: int):
    """timm 1.0.31's rand_bbox with the box centre given (the upper edge cy + (cut_h + 1) // 2),
    and cutmix_bbox_and_lam's corrected lambda."""
    ratio = math.sqrt(1 - lam)
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    yl, yh = min(max(cy - cut_h // 2, 0), img_h), min(max(cy + (cut_h + 1) // 2, 0), img_h)
    xl, xh = min(max(cx - cut_w // 2, 0), img_w), min(max(cx + (cut_w + 1) // 2, 0), img_w)
    return (yl, yh, xl, xh), 1.0 - (yh - yl) * (xh - xl) / float(img_h * img_w)


def torchvision_cutmix_box(img_h: int, img_w: int, lam: float, r_y: int, r_x: int):
    """torchvision v2 CutMix.make_params with its centre (r_y, r_x) given: (y1, y2, x1, x2)
    and lam_adjusted."""
    r = 0.5 * math.sqrt(1.0 - lam)
    r_w_half, r_h_half = int(r * img_w), int(r * img_h)
    x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
    x2, y2 = min(r_x + r_w_half, img_w), min(r_y + r_h_half, img_h)
    return (y1, y2, x1, x2), float(1.0 - (x2 - x1) * (y2 - y1) / (img_w * img_h))


def mix_elem(x: np.ndarray, lam: list[float], boxes: list, partner=None) -> np.ndarray:
    """timm's _mix_elem / _mix_pair: sample i with sample n - 1 - i (or ``partner(i)``: torchvision's
    roll(1) is i - 1), a box pasted where ``boxes[i]`` is given, blended with ``lam[i]`` otherwise
    (float arrays N x C x H x W)."""
    out = x.copy()
    n = len(x)
    partner = partner or (lambda i: n - 1 - i)
    for i in range(n):
        j = partner(i)
        if lam[i] == 1.0:
            continue
        if boxes[i] is not None:
            yl, yh, xl, xh = boxes[i]
            out[i][:, yl:yh, xl:xh] = x[j][:, yl:yh, xl:xh]
        else:
            out[i] = x[i] * lam[i] + x[j] * (1 - lam[i])
    return out


def timm_mix(x: torch.Tensor, soft: torch.Tensor, lam, boxes: list, mode: str):
    """timm 1.0.31's Mixup on a float batch with its draws given (``boxes[i]`` None: a blend):
    _mix_batch's in-place flip, mul_ and add_ with a Python-float lambda; _mix_elem's loop with
    a float32 lam_batch (_mix_pair is the same loop on the pairs); then mixup_target's mix of the
    smoothed one-hot ``soft`` with the flipped one."""
    x = x.clone()
    if mode == "batch":
        lam = float(lam[0])
        if boxes[0] is not None:
            yl, yh, xl, xh = boxes[0]
            x[:, :, yl:yh, xl:xh] = x.flip(0)[:, :, yl:yh, xl:xh]
        elif lam != 1.:
            x_flipped = x.flip(0).mul_(1. - lam)
            x.mul_(lam).add_(x_flipped)
    else:
        n = len(x)
        lam_batch = np.asarray(lam, dtype=np.float32)
        x_orig = x.clone()
        for i in range(n):
            j = n - i - 1
            if boxes[i] is not None:
                yl, yh, xl, xh = boxes[i]
                x[i][:, yl:yh, xl:xh] = x_orig[j][:, yl:yh, xl:xh]
            elif lam_batch[i] != 1.:
                x[i] = x[i] * lam_batch[i] + x_orig[j] * (1 - lam_batch[i])
        lam = torch.tensor(lam_batch, dtype=x.dtype).unsqueeze(1)
    return x, soft * lam + soft.flip(0) * (1. - lam)


def torchvision_mix(x: torch.Tensor, soft: torch.Tensor, lam: float, box):
    """torchvision 0.29's MixUp._transform (``box`` None) and CutMix._transform, one lambda per
    batch: the rolled batch blended as ``inpt.roll(1, 0).mul_(1.0 - lam).add_(inpt.mul(lam))``,
    or the box pasted from it; the labels blended the same way."""
    lam = float(lam)
    if box is None:
        out = x.roll(1, 0).mul_(1.0 - lam).add_(x.mul(lam))
    else:
        y1, y2, x1, x2 = box
        out = x.clone()
        out[..., y1:y2, x1:x2] = x.roll(1, 0)[..., y1:y2, x1:x2]
    return out, soft.roll(1, 0).mul_(1.0 - lam).add_(soft.mul(lam))


def rolled(i: int) -> int:
    """torchvision's MixUp/CutMix partner: ``roll(1, 0)`` puts sample i - 1 beside sample i."""
    return i - 1  # -1 is the last sample, as roll wraps


def photo(i: int = 0, h: int = 72, w: int = 96) -> np.ndarray:
    """A real photo shipped with feedline (RGB uint8), shrunk so a test stays quick."""
    import cv2
    from feedline.sample import photo_paths
    paths = [p for p in photo_paths() if "brick" not in p and "gravel" not in p]  # colour ones
    img = cv2.cvtColor(cv2.imread(paths[i % len(paths)], cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
