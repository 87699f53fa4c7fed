"""What every target field kind is: its column in a labels file, its stored columns, its
statistics for ``feedline info``, its ``verify`` and pack-time checks, its rows in a batch,
how it follows each sample's crop and flip, and which transforms it cannot follow.

A kind is one subclass of `Field` in its own module, listed once in the registry
(`feedline.fields`). Everything else asks the field objects, never a kind's name. numpy is
imported when a method first needs it (`lazy_numpy`): writing the metadata of a pack of
JPEGs stored as they are imports no numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .lazy_numpy import np

GEOMETRIC = "geometric"   # shears, translates or rotates the pixels (RandAugment, TrivialAugmentWide)
MIXING = "mixing"         # blends or pastes another sample into each image (MixUp, CutMix, Mixup)
BLENDING = "blending"     # blends another sample into each image (MixUp, a Mixup with mixup_alpha > 0)


class FieldsError(ValueError):
    """Field specs or columns that do not read as their kind documents."""


@dataclass(frozen=True)
class Geometry:
    """Where each sample of a batch came from: crops (N, 4: top, left, height, width, source
    pixels), flips (N,), the output (height, width), and the boxes' visibility threshold."""

    crops: object
    flips: object
    size: tuple[int, int]
    min_visibility: float = 0.25


class Field:
    """One kind of target. The class says what the kind is; an instance is one data set's
    field: its ``spec`` (what the metadata stores, e.g. ``{"max": 3}``) and its own class list."""

    name: ClassVar[str] = ""
    columns: ClassVar[dict[str, str]] = {}      # stored column -> numpy dtype, little endian
    spec_keys: ClassVar[dict[str, type]] = {}   # what a spec states, with its type
    optional_keys: ClassVar[dict[str, type]] = {}   # what a spec may state (older stores lack it)
    has_classes: ClassVar[bool] = False          # it names classes (its own list, its own numbering)
    names_images: ClassVar[bool] = False         # its classes describe whole images (ids warning)
    refuses: ClassVar[frozenset[str]] = frozenset()   # transform families it cannot follow
    in_pixels: ClassVar[bool] = False            # its values are source pixels: they follow the stored image
    csv: ClassVar[bool] = True                   # a CSV column too, not only a JSON Lines key
    header_words: ClassVar[tuple[str, ...]] = ()  # other names of its column in a CSV header
    example: ClassVar[str] = ""                  # a JSON Lines value, for messages
    task: ClassVar[str | None] = None            # what `feedline train --task` learns from it, if anything
    per_pixel: ClassVar[bool] = False            # made per pixel by the workers with the image, not from columns
    files: ClassVar[bool] = False                # its labels-file values name files packed beside the image

    def __init__(self, spec: dict, classes: list[str] | None = None):
        self.spec = self.check_spec(spec)
        self.classes = list(classes or [])

    @classmethod
    def check_spec(cls, spec) -> dict:
        def wrong(k, t):
            return not isinstance(spec.get(k), t) or (t is int and isinstance(spec[k], bool))
        if not isinstance(spec, dict) or any(wrong(k, t) for k, t in cls.spec_keys.items()):
            raise FieldsError(f"field {cls.name!r}: spec {spec!r} lacks {', '.join(cls.spec_keys) or 'nothing'}")
        bad = [k for k, t in cls.optional_keys.items() if k in spec and wrong(k, t)]
        if bad:
            raise FieldsError(f"field {cls.name!r}: spec {spec!r}: {bad[0]} is not a {cls.optional_keys[bad[0]].__name__}")
        return {k: spec[k] for k in (*cls.spec_keys, *cls.optional_keys) if k in spec}

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def outputs(self) -> int:
        """The width of a model that learns this field (its ``task``): its classes by default."""
        return self.num_classes

    # -- a labels file: one row's value, then the column of every row --------------------------

    @classmethod
    def parse(cls, parser, value, line: int):
        """One row's value, checked (``parser`` gives ``fail`` and ``token``)."""
        raise NotImplementedError

    @classmethod
    def tokens(cls, parsed) -> list[str]:
        """The class names one parsed value names (kinds with classes)."""
        return []

    @classmethod
    def build(cls, parser, lines: list[int], parsed: list, index: dict[str, int]) -> tuple[dict, dict]:
        """(spec, {column: values}) of every row; ``index`` numbers this field's classes."""
        raise NotImplementedError

    # -- its columns ------------------------------------------------------------------------------

    def check_columns(self, a: dict, n: int) -> None:
        """FieldsError when the columns do not hold ``n`` records as the spec says."""

    def take(self, a: dict, idx, n: int) -> dict:
        """The columns of records ``idx`` (int64 array), in that order."""
        raise NotImplementedError

    joined_keys: ClassVar[tuple[str, ...]] = ()   # spec keys that parts joined end to end may differ in

    @classmethod
    def joined_spec(cls, specs: list[dict]) -> dict:
        """The spec of parts joined end to end (shards): the largest of each of ``joined_keys``."""
        return {**specs[0], **{k: max(s[k] for s in specs) for k in cls.joined_keys}}

    def record(self, a: dict, i: int, n: int):
        """Record ``i``'s value as plain Python values."""
        raise NotImplementedError

    # -- batches ----------------------------------------------------------------------------------

    def batch_layout(self, b: int) -> dict[str, tuple[tuple[int, ...], str]]:
        raise NotImplementedError

    def fill(self, a: dict, idx, out: dict, n: int, geometry: Geometry | None) -> None:
        """Rows 0 .. len(idx) - 1 of ``out`` (arrays of ``batch_layout``) from records ``idx``."""
        raise NotImplementedError

    # -- info, verify, pack -----------------------------------------------------------------------

    def stats(self, a: dict, n: int) -> dict:
        return {}

    @classmethod
    def describe(cls, stats: dict) -> str:
        return cls.name

    def problems(self, a: dict, n: int, sizes) -> list[tuple[int, str]]:
        """(record, problem) for each value wrong; ``sizes`` (height, width) per record, or None."""
        return []

    def class_occurrences(self, a: dict, n: int):
        """(records, classes) of every class this field names, for per-class counts; None without classes."""
        return None

    def fit(self, a: dict, n: int, sizes) -> tuple[dict, int]:
        """The columns fitted to their images at pack time (``sizes`` known for every record):
        (columns, values changed). Values wholly wrong are `problems`, refused before this."""
        return a, 0

    def orient(self, a: dict, n: int, orientations, sizes) -> dict:
        """The columns of records whose image was turned by its EXIF orientation at pack time
        (``orientations``: 1..8 per record, 1 for none), moved from the stored frame (the
        file's pixels) into the displayed one (``sizes``: the turned images' (height, width))."""
        return a

    def annotated(self, a: dict, n: int):
        """Per record: whether it holds values in pixels (a box, a labelled point); None for a
        kind whose values are not in pixels."""
        return None


# -- helpers for compact lists: offsets int64[n + 1], item i of record r at offsets[r]..[r + 1] --

def segments(offsets, indices) -> tuple:
    """Where the items of records ``indices`` lie: (positions of their items in order, offsets
    of the gathered list). Vectorized: no loop over records."""
    starts, stops = offsets[indices], offsets[np.asarray(indices) + 1]
    counts = stops - starts
    new_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    positions = np.arange(new_offsets[-1], dtype=np.int64) + np.repeat(starts - new_offsets[:-1], counts)
    return positions, new_offsets


def check_offsets(field: str, offsets_name: str, off, items: int, n: int, most: int | None) -> None:
    if len(off) != n + 1 or off[0] != 0 or bool(np.any(off[1:] < off[:-1])) or off[-1] != items:
        raise FieldsError(f"{offsets_name}: offsets out of order or disagreeing with their items")
    largest = int(np.max(np.diff(off), initial=0))
    if most is not None and largest > most:
        raise FieldsError(f"{field}: a record holds {largest}, more than the stated max {most}")


def owners(offsets, n: int):
    """The record of each item of a compact list."""
    return np.repeat(np.arange(n), np.diff(offsets))


MIRRORING = (2, 4, 5, 7)   # EXIF orientations that mirror the image: left and right trade places


def oriented_xy(x, y, orientation, width, height) -> tuple:
    """Points (x, y) of the stored frame of images turned by their EXIF ``orientation`` (1..8),
    in the displayed frame; ``width``, ``height``: the displayed images' (all broadcast)."""
    o = np.asarray(orientation)
    cases = [o == k for k in range(2, 9)]
    new_x = np.select(cases, [width - x, width - x, x, y, width - y, width - y, y], x)
    new_y = np.select(cases, [y, height - y, height - y, x, x, height - x, height - x], y)
    return new_x, new_y


def stored_sizes(orientations, sizes):
    """The (height, width) of each image in its stored frame, from the displayed ``sizes``:
    orientations 5 to 8 turn the image a quarter, swapping them."""
    hw = np.asarray(sizes, dtype=np.int64).reshape(-1, 2)
    return np.where((np.asarray(orientations) >= 5)[:, None], hw[:, ::-1], hw)


def spread(counts) -> dict:
    if len(counts) == 0:
        return {"min": 0, "mean": 0.0, "max": 0}
    return {"min": int(counts.min()), "mean": float(counts.mean()), "max": int(counts.max())}


def class_range_problems(classes, owner, k: int, what: str) -> list[tuple[int, str]]:
    bad = np.flatnonzero((classes < 0) | (classes >= k))
    return [(int(owner[j]), f"{what} {int(classes[j])} outside 0..{k - 1} ({k} classes)") for j in bad]
