"""CPU time of each per-sample op alone on one 224 x 224 photo, one thread: feedline's host
path (what a decode thread runs) beside PIL doing the same op (what a DataLoader worker runs
with torchvision's or timm's PIL transforms).

Every op of RandAugment / TrivialAugmentWide / AutoAugment (torchvision's set, at RandAugment's
magnitude 9 of 31), of timm's rand-m* sets (level 9, bilinear and bicubic geometry), ColorJitter's
four adjustments, grayscale, GaussianBlur(23), RandomErasing; then the whole transforms over
the draws of 64 samples. A figure is the CPU time (time.process_time) of one call, the least
over interleaved rounds of many calls: on a shared machine only the ratios hold.

    python bench/op_costs.py [--calls N] [--rounds R] [--quick]
    python bench/op_costs.py --against /path/to/other/checkout   # before/after, interleaved

``--against`` measures feedline from another checkout (an older revision) in alternating
subprocess rounds, so both columns saw the same machine. bench/augment.py prints this table
too (its ops rows).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIZE = 224
TV_OPS = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
          "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")
TIMM_GEOMETRY = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")


def photo(i: int = 0) -> np.ndarray:
    import cv2
    from feedline.sample import photo_paths
    paths = photo_paths()
    img = cv2.cvtColor(cv2.imread(paths[i % len(paths)], cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return cv2.resize(img, (SIZE, SIZE), interpolation=cv2.INTER_AREA)


def feedline_cases(img: np.ndarray) -> dict:
    """name -> a call of feedline's host path on ``img`` (public SampleOp.apply_cpu)."""
    from feedline.transforms import (ColorJitter, GaussianBlur, RandAugment, RandomErasing, RandomGrayscale,
                                     SampleTransforms, TimmRandAugment, TrivialAugmentWide)
    from feedline.transforms.autoaugment import OPS
    from feedline.transforms.timm_policy import RAND_INCREASING_TRANSFORMS, RAND_TRANSFORMS
    cases = {}
    ra = RandAugment(1, 9)
    for op in TV_OPS:
        p = {"op": np.array([OPS.index(op)]), "negative": np.array([False]), "bin": np.array([9])}
        cases[f"tv {op}"] = lambda p=p: ra.apply_cpu(img, p)
    names = sorted(set(RAND_TRANSFORMS) | set(RAND_INCREASING_TRANSFORMS))
    for name in names:
        ops = RAND_TRANSFORMS if name in RAND_TRANSFORMS else RAND_INCREASING_TRANSFORMS
        op = TimmRandAugment("rand-m9-n1-inc1" if ops is RAND_INCREASING_TRANSFORMS else "rand-m9-n1")
        for bicubic in ((False, True) if name in TIMM_GEOMETRY else (False,)):
            p = {"op": np.array([ops.index(name)]), "apply": np.array([True]), "negate": np.array([False]),
                 "level": np.array([9.0]), "bicubic": np.array([bicubic])}
            label = f"timm {name}" + (" bicubic" if bicubic else "")
            cases[label] = lambda op=op, p=p: op.apply_cpu(img, p)
    jitter = ColorJitter(0.4, 0.4, 0.4, 0.1)
    for j, part in enumerate(("brightness", "contrast", "saturation", "hue")):
        factors = np.full(4, np.nan)
        factors[j] = 0.05 if part == "hue" else 1.3
        p = {"factors": factors, "order": np.arange(4)}
        cases[f"jitter {part}"] = lambda p=p: jitter.apply_cpu(img, p)
    gray = RandomGrayscale(1.0)
    cases["grayscale"] = lambda: gray.apply_cpu(img, {"apply": True})
    blur = GaussianBlur(23)
    cases["gaussian blur 23, sigma 1.5"] = lambda: blur.apply_cpu(img, {"sigma": 1.5})
    for value in (0, "random"):
        erase = RandomErasing(1.0, value=value)
        drawn = erase.draw(0, 0, np.arange(64))
        rows = [{k: v[i] for k, v in drawn.items()} for i in range(64)]
        cycle = iter(range(1 << 62))
        cases[f"erasing value={value}"] = lambda e=erase, r=rows, c=cycle: e.apply_cpu(img, r[next(c) % 64])
    for name, t in (("RandAugment(2, 9)", RandAugment(2, 9)), ("TrivialAugmentWide()", TrivialAugmentWide()),
                    ("TimmRandAugment(rand-m9-mstd0.5-inc1)", TimmRandAugment("rand-m9-mstd0.5-inc1")),
                    ("ColorJitter(0.4, 0.4, 0.4, 0.1)", jitter), ("RandomErasing(0.25)", RandomErasing(0.25))):
        ops = SampleTransforms([t])
        drawn = ops.draw(0, 0, np.arange(64))
        cycle = iter(range(1 << 62))
        cases[f"whole {name}"] = lambda o=ops, d=drawn, c=cycle: o.apply_drawn(img, d, next(c) % 64, 0, 0, 0)
    return cases


def pil_cases(img: np.ndarray) -> dict:
    """name -> PIL doing the same op (torchvision's / timm's PIL calls), where there is one."""
    from PIL import Image, ImageEnhance, ImageFilter, ImageOps
    im = Image.fromarray(img)
    w, h = im.size
    m = {"ShearX": 0.3 * 9 / 30, "ShearY": 0.3 * 9 / 30, "TranslateX": 150 / 331 * w * 9 / 30,
         "TranslateY": 150 / 331 * h * 9 / 30, "Rotate": 30.0 * 9 / 30}
    affine = {"ShearX": (1, m["ShearX"], 0, 0, 1, 0), "ShearY": (1, 0, 0, m["ShearY"], 1, 0),
              "TranslateX": (1, 0, -int(m["TranslateX"]), 0, 1, 0),
              "TranslateY": (1, 0, 0, 0, 1, -int(m["TranslateY"]))}
    cases = {}
    for op, matrix in affine.items():
        cases[f"tv {op}"] = lambda mx=matrix: im.transform(im.size, Image.AFFINE, mx, Image.NEAREST, fillcolor=(0, 0, 0))
    cases["tv Rotate"] = lambda: im.rotate(9.0, Image.NEAREST, fillcolor=(0, 0, 0))
    for op in ("Brightness", "Color", "Contrast", "Sharpness"):
        cases[f"tv {op}"] = lambda op=op: getattr(ImageEnhance, op)(im).enhance(1.27)
    cases["tv Posterize"] = lambda: ImageOps.posterize(im, 7)
    cases["tv Solarize"] = lambda: ImageOps.solarize(im, 178.5)
    cases["tv AutoContrast"] = lambda: ImageOps.autocontrast(im)
    cases["tv Equalize"] = lambda: ImageOps.equalize(im)
    fill = (124, 116, 104)
    for name in TIMM_GEOMETRY:
        for bicubic in (False, True):
            resample = Image.BICUBIC if bicubic else Image.BILINEAR
            label = f"timm {name}" + (" bicubic" if bicubic else "")
            if name == "Rotate":
                cases[label] = lambda r=resample: im.rotate(27.0, resample=r, fillcolor=fill)
            else:
                mx = {"ShearX": (1, 0.27, 0, 0, 1, 0), "ShearY": (1, 0, 0, 0.27, 1, 0),
                      "TranslateXRel": (1, 0, 0.405 * w, 0, 1, 0), "TranslateYRel": (1, 0, 0, 0, 1, 0.405 * h)}[name]
                cases[label] = lambda mx=mx, r=resample: im.transform(im.size, Image.AFFINE, mx, r, fillcolor=fill)
    for name, fn in (("AutoContrast", ImageOps.autocontrast), ("Equalize", ImageOps.equalize), ("Invert", ImageOps.invert)):
        cases[f"timm {name}"] = lambda fn=fn: fn(im)
    lut = [min(255, v + 99) if v < 128 else v for v in range(256)] * 3
    cases["timm SolarizeAdd"] = lambda: im.point(lut)
    for name in ("Brightness", "Color", "Contrast", "Sharpness"):   # timm's level 9: 1.72, or 1.81 increasing
        cases[f"timm {name}"] = lambda n=name: getattr(ImageEnhance, n)(im).enhance(1.72)
        cases[f"timm {name}Increasing"] = lambda n=name: getattr(ImageEnhance, n)(im).enhance(1.81)
    cases["timm Posterize"] = lambda: ImageOps.posterize(im, 3)
    cases["timm PosterizeIncreasing"] = lambda: ImageOps.posterize(im, 1)
    cases["timm Solarize"] = lambda: ImageOps.solarize(im, 230)
    cases["timm SolarizeIncreasing"] = lambda: ImageOps.solarize(im, 26)
    for part, enhancer in (("brightness", ImageEnhance.Brightness), ("contrast", ImageEnhance.Contrast),
                           ("saturation", ImageEnhance.Color)):
        cases[f"jitter {part}"] = lambda e=enhancer: e(im).enhance(1.3)

    def hue():   # torchvision's F_pil.adjust_hue
        hh, s, v = im.convert("HSV").split()
        shifted = (np.asarray(hh, np.uint8) + np.uint8(12)).astype(np.uint8)
        return Image.merge("HSV", (Image.fromarray(shifted, "L"), s, v)).convert("RGB")
    cases["jitter hue"] = hue
    cases["grayscale"] = lambda: im.convert("L").convert("RGB")
    cases["gaussian blur 23, sigma 1.5"] = lambda: im.filter(ImageFilter.GaussianBlur(1.5))
    return cases


def cpu_ms(fn, calls: int) -> float:
    """CPU milliseconds per call over ``calls`` calls."""
    t0 = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t0) / calls * 1e3


def measure(calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """{"feedline": {op: ms}, "pil": {op: ms}}: the least over ``rounds`` interleaved rounds."""
    import torch
    torch.set_num_threads(1)   # a worker process's setting; OpenCV keeps its own, as in a worker
    img = photo()
    sides = {"feedline": feedline_cases(img), "pil": pil_cases(img)}
    for cases in sides.values():   # first calls: caches, imports, index maps (of all 64 draws)
        for name, fn in cases.items():
            for _ in range(64 if name.startswith(("whole", "erasing")) else 1):
                fn()
    best: dict[str, dict[str, float]] = {side: {} for side in sides}
    for _ in range(rounds):
        for name in sides["feedline"]:
            for side, cases in sides.items():
                if name in cases:
                    ms = cpu_ms(cases[name], calls)
                    best[side][name] = min(best[side].get(name, math.inf), ms)
    return best


def against(other: str, calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """This checkout's feedline and ``other``'s, in alternating subprocess rounds."""
    best: dict[str, dict[str, float]] = {"this": {}, "other": {}}
    for _ in range(rounds):
        for side, tree in (("this", None), ("other", other)):
            cmd = [sys.executable, __file__, "--worker", "--calls", str(calls), "--rounds", "1"]
            if tree:
                cmd += ["--feedline-from", tree]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            for name, ms in json.loads(done.stdout.splitlines()[-1])["feedline"].items():
                best[side][name] = min(best[side].get(name, math.inf), ms)
    return best


def table(rows: list[tuple[str, float | None, float | None]], heads: tuple[str, str]) -> str:
    lines = [f"| op | {heads[0]} ms | {heads[1]} ms | {heads[1]} / {heads[0]} |", "| --- | ---: | ---: | ---: |"]
    for name, a, b in rows:
        q = f"{b / a:.2f}" if a and b else ""
        lines.append(f"| {name} | {a:.3f} | " + (f"{b:.3f}" if b is not None else "") + f" | {q} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/op_costs.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=None, help="calls per round and op (default 50)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds; the least is kept (default 5)")
    p.add_argument("--quick", action="store_true", help="2 calls, 1 round: checks that every op runs")
    p.add_argument("--against", metavar="CHECKOUT", help="compare with feedline from another checkout")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--feedline-from", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    calls, rounds = a.calls or (2 if a.quick else 50), a.rounds or (1 if a.quick else 5)
    if a.feedline_from:
        sys.path.insert(0, a.feedline_from)
    elif str(Path(__file__).resolve().parent.parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if a.worker:
        print(json.dumps(measure(calls, rounds)))
        return 0
    if a.against:
        best = against(a.against, calls, rounds)
        names = list(best["this"])
        print(table([(n, best["this"][n], best["other"].get(n)) for n in names], ("this", "other")))
    else:
        best = measure(calls, rounds)
        print(table([(n, ms, best["pil"].get(n)) for n, ms in best["feedline"].items()], ("feedline", "PIL")))
    print("CPU ms per 224 x 224 image, one thread, least of the rounds: indicative on a shared machine")
    if a.json:
        Path(a.json).write_text(json.dumps({"calls": calls, "rounds": rounds, "ms": best}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
