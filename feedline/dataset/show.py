"""A batch as a picture: one PNG grid of the images a loader delivered, un-normalized for the
eye, each with its targets drawn: class names under it (a mixed batch's two classes with
their weights), its boxes with their class names, its keypoints numbered (point k stays k
through a flip), its mask as a colour per class blended over the pixels, so a recipe can be
looked at before a GPU-day is spent on it.

Each target a batch can carry is drawn by one painter, keyed by its name in the batch
(``PAINTERS``); a new target kind is one more painter there. Images are scaled up by a whole factor (up to ``MIN_CELL`` pixels a
side) so that a box drawn at output pixel (x, y) lands at cell origin + (x, y) * scale.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

PAD = 4                       # pixels around and between cells
LINE = 13                     # pixels of one caption line
CAPTION = 2 * LINE + 2        # the caption band under each image
MIN_CELL = 128                # smaller images are scaled up by a whole factor to about this
BACKGROUND = (24, 24, 24)
TEXT = (235, 235, 235)
PALETTE = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212)]


@dataclass(frozen=True)
class Grid:
    """Where each cell lies: ``columns`` x ``rows`` cells of an image of ``height`` x ``width``
    scaled by ``scale``, with its caption band."""

    count: int
    height: int
    width: int
    columns: int
    scale: int

    @classmethod
    def of(cls, count: int, height: int, width: int, columns: int | None = None) -> "Grid":
        columns = columns or math.ceil(math.sqrt(count))
        return cls(count, height, width, max(1, min(columns, count)), max(1, -(-MIN_CELL // max(height, width))))

    @property
    def rows(self) -> int:
        return -(-self.count // self.columns)

    @property
    def cell(self) -> tuple[int, int]:
        """(width, height) of one cell: the scaled image and its caption."""
        return self.width * self.scale, self.height * self.scale + CAPTION

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the whole picture."""
        w, h = self.cell
        return self.columns * w + (self.columns + 1) * PAD, self.rows * h + (self.rows + 1) * PAD

    def origin(self, i: int) -> tuple[int, int]:
        """The top-left pixel of image ``i`` in the picture."""
        w, h = self.cell
        return PAD + (i % self.columns) * (w + PAD), PAD + (i // self.columns) * (h + PAD)


def pixels(images, mean, std) -> np.ndarray:
    """N x H x W x 3 uint8 from a delivered batch (N x 3 x H x W): uint8 as it is, floats
    un-normalized with ``mean`` and ``std`` (0..1 units, as the loader's) and clipped."""
    x = images.detach().float().cpu()
    if images.dtype.is_floating_point:
        m = x.new_tensor(mean if mean is not None else (0.0, 0.0, 0.0)).view(1, 3, 1, 1)
        s = x.new_tensor(std if std is not None else (1.0, 1.0, 1.0)).view(1, 3, 1, 1)
        x = ((x * s + m) * 255).round().clamp(0, 255)
    return x.permute(0, 2, 3, 1).contiguous().numpy().astype(np.uint8)


def as_dict(targets, fields: dict) -> dict:
    """A batch's targets by name: the loader hands a bare tensor for a store with one field
    (the label, or another single field), a dict otherwise."""
    if isinstance(targets, dict):
        return targets
    return {next(iter(fields)) if len(fields) == 1 else "label": targets}


def class_lines(row, names: list[str]) -> list[str]:
    """A class index as its name; a mixed (soft) row as its two heaviest classes, a line each
    with its weight."""
    if row.ndim == 0:
        k = int(row)
        return [names[k] if 0 <= k < len(names) else str(k)]
    top = row.float().topk(min(2, row.numel()))
    return [f"{'+ ' if j else ''}{names[int(k)] if int(k) < len(names) else int(k)} {float(v):.2f}"
            for j, (v, k) in enumerate(zip(top.values, top.indices)) if float(v) > 0.005]


def caption(targets: dict, i: int, class_lists: dict) -> list[str]:
    """The caption lines of sample ``i``: its class, then its other labels or numbers."""
    lines = []
    if "label" in targets:
        lines += class_lines(targets["label"][i], class_lists.get("label", []))
    if "labels" in targets:
        names = class_lists.get("labels", [])
        on = [names[k] if k < len(names) else str(k) for k in (targets["labels"][i] > 0.5).nonzero().flatten().tolist()]
        lines.append(", ".join(on) or "(no labels)")
    if "target" in targets:
        values = targets["target"][i].flatten().tolist()
        lines.append("target " + " ".join(f"{v:.3g}" for v in values))
    return lines


def paint_boxes(draw, targets: dict, i: int, origin, scale: int, class_lists: dict, font) -> None:
    """Image ``i``'s boxes: outlines in their class's colour, the class name at the top left."""
    names, count = class_lists.get("boxes", []), int(targets["box_counts"][i])
    for box, k in zip(targets["boxes"][i, :count].tolist(), targets["box_classes"][i, :count].tolist()):
        x0, y0, x1, y1 = (origin[j % 2] + v * scale for j, v in enumerate(box))
        colour = PALETTE[k % len(PALETTE)]
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=colour, width=2)
        draw.text((x0 + 3, y0 + 2), names[k] if 0 <= k < len(names) else str(k), fill=colour, font=font)


def paint_keypoints(draw, targets: dict, i: int, origin, scale: int, class_lists: dict, font) -> None:
    """Image ``i``'s visible keypoints, each a dot with its number."""
    for k, (x, y, visible) in enumerate(targets["keypoints"][i].tolist()):
        if visible > 0:
            cx, cy = origin[0] + x * scale, origin[1] + y * scale
            colour = PALETTE[k % len(PALETTE)]
            draw.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill=colour, outline=(0, 0, 0))
            draw.text((cx + 4, cy - 6), str(k), fill=colour, font=font)


MASK_ALPHA = 110      # how much of a class's colour covers its pixels
IGNORED = (128, 128, 128)   # the colour of 255, the default ignore_index (outside the image, erased)


def paint_mask(draw, targets: dict, i: int, origin, scale: int, class_lists: dict, font) -> None:
    """Image ``i``'s mask: each class but 0 (background, by convention) in its colour, blended."""
    from PIL import Image
    mask = targets["mask"][i].cpu().numpy()
    for k in np.unique(mask).tolist():
        if k == 0:
            continue
        colour = IGNORED if k == 255 else PALETTE[k % len(PALETTE)]
        matte = Image.fromarray(((mask == k) * MASK_ALPHA).astype(np.uint8)).resize(   # its pixels, partly covered
            (mask.shape[1] * scale, mask.shape[0] * scale), Image.NEAREST)
        draw.bitmap(origin, matte, fill=colour)


# target name -> its painter, in drawing order (a mask under the boxes and points)
PAINTERS: dict[str, Callable] = {"mask": paint_mask, "boxes": paint_boxes, "keypoints": paint_keypoints}


def batch_picture(images, targets, *, fields: dict, class_lists: dict, mean=None, std=None,
                  columns: int | None = None, annotate: bool = True):
    """The batch as a PIL image (RGB): the grid of its images with their targets drawn.
    ``fields``/``class_lists``: the store's (what the targets are and their class names)."""
    from PIL import Image, ImageDraw, ImageFont
    rgb = pixels(images, mean, std)
    grid = Grid.of(len(rgb), rgb.shape[1], rgb.shape[2], columns)
    picture = Image.new("RGB", grid.size, BACKGROUND)
    draw, font = ImageDraw.Draw(picture), ImageFont.load_default()
    named = as_dict(targets, fields)
    for i, image in enumerate(rgb):
        origin = grid.origin(i)
        tile = Image.fromarray(image).resize((grid.width * grid.scale, grid.height * grid.scale), Image.NEAREST)
        picture.paste(tile, origin)
        if not annotate:
            continue
        for name, paint in PAINTERS.items():
            if name in named:
                paint(draw, named, i, origin, grid.scale, class_lists, font)
        below = origin[1] + grid.height * grid.scale + 2
        for j, text in enumerate(caption(named, i, class_lists)[:2]):
            draw.text((origin[0] + 2, below + j * LINE), fit(text, grid.cell[0] - 4, font), fill=TEXT, font=font)
    return picture


def fit(text: str, width: int, font) -> str:
    """``text`` cut with an ellipsis to ``width`` pixels."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "...") > width:
        text = text[:-1]
    return text + "..."
