"""What `pack` is asked to do: PackOptions, validated when built."""
from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

from feedline.core.errors import PackError


class OutputFormat(str, Enum):
    LMDB = "lmdb"
    HDF5 = "hdf5"


class OnError(str, Enum):
    """What to do with an input file that cannot be packed."""

    SKIP = "skip"   # pack everything else and list the bad files in OUT.errors.csv
    FAIL = "fail"   # stop at the first bad file and leave nothing at OUT


class PackCheck(str, Enum):
    """How JPEGs stored as they are get checked."""

    HEADERS = "headers"   # markers and header only (fast: about the cost of copying the file)
    DECODE = "decode"     # also decoded strictly: damaged image data is skipped as corrupt


class LabelsFrame(str, Enum):
    """Which pixels a labels file's boxes and keypoints are in, for an image with an EXIF
    orientation (which pack applies to the pixels)."""

    STORED = "stored"         # the file's pixels before the orientation (COCO's): turned with the image
    DISPLAYED = "displayed"   # the image as shown, the orientation applied: kept as given


class Layout(str, Enum):
    """How JPEG records are laid out."""

    ORIGINAL = "original"   # the source's bytes as they are
    GRID = "grid"           # a restart marker after every MCU, transcoded losslessly: crops decode less


_EXTENSIONS = {".lmdb": OutputFormat.LMDB, ".mdb": OutputFormat.LMDB,
               ".h5": OutputFormat.HDF5, ".hdf5": OutputFormat.HDF5}

DEFAULT_QUALITY = 95
DEFAULT_MAX_PIXELS = 100_000_000


def format_for(out: str, requested: OutputFormat | None) -> OutputFormat:
    """The output format: the one asked for, else the one OUT's extension names."""
    if requested is not None:
        return requested
    ext = os.path.splitext(out)[1].lower()
    if ext not in _EXTENSIONS:
        raise PackError(f"{out}: cannot tell the format from the extension {ext or '(none)'}; "
                        "name it .lmdb, .h5 or .hdf5, or pass --format lmdb|hdf5")
    return _EXTENSIONS[ext]


def _enum(kind, value, name: str):
    if isinstance(value, kind):
        return value
    try:
        return kind(str(value).lower())
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise PackError(f"{name} must be one of {choices}, got {value!r}") from None


def _int_or_none(value, name: str, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PackError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise PackError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class PackOptions:
    """Options of one pack. Those that change the output (see ``output_options``) are
    stored in the data set's metadata and must match when a pack is resumed."""

    format: OutputFormat | None = None      # None: from OUT's extension
    labels_csv: str | None = None           # CSV of (relative path, label) instead of class folders
    max_side: int | None = None             # shrink images whose longer side is larger, then re-encode
    quality: int = DEFAULT_QUALITY          # JPEG quality of converted and shrunk images
    max_pixels: int = DEFAULT_MAX_PIXELS    # larger images are skipped (decompression bombs)
    on_error: OnError = OnError.SKIP
    check: PackCheck = PackCheck.HEADERS    # DECODE also decodes every JPEG stored as it is
    space_check: bool = True                # refuse to start when the estimate does not fit on the disk
    jobs: int | None = None                 # reader/converter threads; None: one per core
    resume: bool = False                    # continue an interrupted pack of the same OUT
    overwrite: bool = False                 # replace an existing OUT (only once the new one is complete)
    progress: bool = True                   # a progress bar on stderr, when it is a terminal
    commit_every: int = 1000                # files per commit: the granularity of --resume
    commit_bytes: int = 16 << 20            # ... or this many image bytes, whichever comes first
    # Sharded output (at most one of the three): OUT-00000-of-0000N.EXT plus OUT.shards.json.
    shard_records: int | None = None        # files per shard
    shard_bytes: int | None = None          # input bytes per shard (the shard's output is about as large)
    num_shards: int | None = None           # this many shards of equal file counts
    shard_index: int | None = None          # pack only this shard (splitting a pack across machines)
    shuffle: int | None = None              # a seed: records in that random order, not sorted
    layout: Layout = Layout.ORIGINAL
    labels_frame: LabelsFrame | None = None   # needed when an image with boxes or keypoints has an EXIF orientation
    flip_pairs: tuple[tuple[int, int], ...] | None = None   # keypoints that trade places in a mirror

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalize the fields once, here
        if self.format is not None:
            set_(self, "format", _enum(OutputFormat, self.format, "format"))
        set_(self, "on_error", _enum(OnError, self.on_error, "on_error"))
        set_(self, "check", _enum(PackCheck, self.check, "check"))
        set_(self, "layout", _enum(Layout, self.layout, "layout"))
        if self.labels_frame is not None:
            set_(self, "labels_frame", _enum(LabelsFrame, self.labels_frame, "labels_frame"))
        if self.flip_pairs is not None:
            set_(self, "flip_pairs", _pairs(self.flip_pairs))
        if self.labels_csv is not None:
            set_(self, "labels_csv", os.path.abspath(os.fspath(self.labels_csv)))
        _int_or_none(self.shuffle, "shuffle", 0)
        _int_or_none(self.max_side, "max_side", 1)
        _int_or_none(self.quality, "quality", 1)
        if self.quality > 100:
            raise PackError(f"quality must be 1..100, got {self.quality}")
        _int_or_none(self.max_pixels, "max_pixels", 1)
        _int_or_none(self.jobs, "jobs", 1)
        _int_or_none(self.commit_every, "commit_every", 1)
        _int_or_none(self.commit_bytes, "commit_bytes", 1)
        for name in ("shard_records", "shard_bytes", "num_shards"):
            _int_or_none(getattr(self, name), name, 1)
        _int_or_none(self.shard_index, "shard_index", 0)
        given = [n for n in ("shard_records", "shard_bytes", "num_shards") if getattr(self, n) is not None]
        if len(given) > 1:
            raise PackError(f"give one of --shard-size and --num-shards, not both ({', '.join(given)})")
        if self.shard_index is not None and not given:
            raise PackError("--shard-index needs --num-shards N (or --shard-size): which split is it a part of?")

    @property
    def sharded(self) -> bool:
        return any(v is not None for v in (self.shard_records, self.shard_bytes, self.num_shards))

    @property
    def threads(self) -> int:
        if self.jobs:
            return self.jobs
        try:
            return len(os.sched_getaffinity(0))  # the cores this process may use, in a container too
        except AttributeError:
            return os.cpu_count() or 1

    def output_options(self, fmt: OutputFormat) -> dict:
        """The options that shape the output: stored as the metadata's pack_options."""
        chosen = {"labels_frame": self.labels_frame.value} if self.labels_frame is not None else {}
        if self.flip_pairs is not None:   # named only when given: packs from before match as they were
            chosen["flip_pairs"] = [list(p) for p in self.flip_pairs]
        return {"format": fmt.value, "labels_csv": self.labels_csv, "max_side": self.max_side,
                "quality": self.quality, "max_pixels": self.max_pixels, "on_error": self.on_error.value,
                "check": self.check.value, "shuffle": self.shuffle, "layout": self.layout.value,
                "alpha": "composited on white", "exif_orientation": "applied", **chosen}


def _pairs(value) -> tuple[tuple[int, int], ...]:
    """flip_pairs as a tuple of (a, b) of ints; their range is checked against the keypoints."""
    try:
        pairs = tuple((a, b) for a, b in value)
    except (TypeError, ValueError):
        pairs = None
    if not pairs or any(isinstance(k, bool) or not isinstance(k, int) for p in pairs for k in p):
        raise PackError(f"flip_pairs must be pairs of keypoint indices such as ((1, 2), (3, 4)), got {value!r}")
    return pairs


def parse_flip_pairs(text: str) -> tuple[tuple[int, int], ...]:
    """``--flip-pairs``: "1:2,3:4" (0-based keypoint indices, left:right) as ((1, 2), (3, 4))."""
    pairs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        a, sep, b = part.partition(":")
        if not sep or not a.strip().isdigit() or not b.strip().isdigit():
            raise PackError(f"--flip-pairs {text!r}: {part!r} is not A:B; give the keypoints that trade places "
                            "in a mirror as 0-based index pairs, e.g. --flip-pairs 1:2,3:4")
        pairs.append((int(a), int(b)))
    if not pairs:
        raise PackError(f"--flip-pairs {text!r}: no pairs; e.g. --flip-pairs 1:2,3:4")
    return tuple(pairs)


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_shard_size(text: str) -> dict:
    """``--shard-size``: a record count ("100000") or a size ("10GB", "512MiB"), as the
    PackOptions field it sets: {"shard_records": n} or {"shard_bytes": n}."""
    raw = text.strip().upper().replace(" ", "").replace("_", "")
    number = raw.rstrip("KMGTIB")
    unit = raw[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or value <= 0 or (not unit and not number.isdigit()):
        raise PackError(f"--shard-size {text!r}: give a record count (e.g. 100000) or a size with a unit "
                        "(e.g. 10GB, 512MiB)")
    if not unit:
        return {"shard_records": int(number)}
    return {"shard_bytes": int(value * _UNITS[unit])}
