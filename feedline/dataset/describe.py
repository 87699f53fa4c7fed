"""What a data set holds, from its columns and metadata alone: nothing is decoded.

``describe`` backs ``feedline info``: record and class counts (each field with classes has
its own list), encoded bytes, the spread of image sizes, the format, how the file was packed,
and its fields (what each kind's ``stats`` says: labels and boxes per image, target ranges).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import numpy as np

from ..fields import KINDS
from ..stores import Store, is_remote, open_dataset


@dataclass
class SizeStats:
    """Min, median and max of one image dimension, in pixels."""

    min: int
    median: float
    max: int

    @classmethod
    def of(cls, values: np.ndarray) -> "SizeStats | None":
        if len(values) == 0:
            return None
        return cls(min=int(values.min()), median=float(np.median(values)), max=int(values.max()))


@dataclass
class ClassCount:
    label: int
    name: str
    count: int


@dataclass
class DatasetInfo:
    """The facts ``feedline info`` shows; ``to_dict`` is its ``--json`` output."""

    filename: str
    kind: str                        # "lmdb", "hdf5" or "folder"
    format_version: int | None       # None for a folder
    checksums: bool                  # records carry checksums (format version 2 on)
    shards: list[str]                # the shard files of a sharded data set; empty otherwise
    file_bytes: int                  # the file on disk; for a folder, its images together
    count: int
    classes: list[ClassCount]        # the label's classes (or else the first field's), in label order
    labels_out_of_range: int         # records whose label (or labels, box) names no class (0 in a sound file)
    image_bytes: int                 # encoded images together
    mean_image_bytes: float
    height: SizeStats | None
    width: SizeStats | None
    pack_options: dict = field(default_factory=dict)
    source: str | None = None
    created: str | None = None
    feedline_version: str | None = None
    fields: dict = field(default_factory=dict)   # field name -> its statistics (its kind's ``stats``)
    class_lists: dict = field(default_factory=dict)   # field name -> [ClassCount] (records naming each class)
    jpeg_warnings: int | None = None   # records packed with a benign libjpeg warning (pack --check decode)

    def to_dict(self) -> dict:
        return asdict(self)


def describe(dataset: Store | str | os.PathLike | list) -> DatasetInfo:
    """Describe a store, or what `open_dataset` opens from ``dataset`` (opened and closed here)."""
    if isinstance(dataset, Store):
        return _describe(dataset)
    with open_dataset(dataset) as store:
        return _describe(store)


def _describe(store: Store) -> DatasetInfo:
    meta = store.meta
    columns = store.target_columns
    lists = {name: [ClassCount(label, str(c), int(n)) for label, (c, n) in
                    enumerate(zip(store.class_lists[name], columns.class_occurrences(name)))]
             for name in columns.class_lists}
    lengths = store.byte_lengths()
    sizes = np.asarray(store.sizes).reshape(-1, 2)
    image_bytes = int(lengths.sum())
    if store.kind == "folder":
        file_bytes = image_bytes
    elif is_remote(store):
        file_bytes = store.file_bytes()   # from the index: nothing fetched
    else:
        file_bytes = sum(os.path.getsize(f) for f in store.files())
    return DatasetInfo(
        filename=store.filename if is_remote(store) else os.path.abspath(store.filename),
        kind=store.kind,
        format_version=meta.get("format_version"),
        checksums=store.checksums is not None,
        shards=list(meta.get("shards") or []),
        file_bytes=file_bytes,
        count=len(store),
        classes=next(iter(lists.values()), []),
        labels_out_of_range=columns.naming_no_class(),
        image_bytes=image_bytes,
        mean_image_bytes=image_bytes / len(store) if len(store) else 0.0,
        height=SizeStats.of(sizes[:, 0]),
        width=SizeStats.of(sizes[:, 1]),
        pack_options=dict(meta.get("pack_options") or {}),
        source=meta.get("source"),
        created=meta.get("created"),
        feedline_version=meta.get("feedline_version"),
        fields=columns.stats(),
        class_lists=lists,
        jpeg_warnings=meta.get("jpeg_warnings"),
    )


def describe_fields(stats: dict[str, dict]) -> str:
    """One line for people: each field and what it holds."""
    return ", ".join(KINDS[name].describe(s) for name, s in stats.items())


def human_bytes(n: float) -> str:
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"


def format_info(info: DatasetInfo, max_classes: int = 20) -> str:
    """A table for people: one fact per line, classes listed up to ``max_classes``."""
    fmt = info.kind if info.format_version is None else f"{info.kind} (format version {info.format_version})"
    if info.shards:
        fmt += f", {len(info.shards)} shards"
    rows = [
        ("file", info.filename),
        ("format", fmt),
        ("file size", f"{human_bytes(info.file_bytes)} ({info.file_bytes:,} bytes)"),
    ]
    if info.shards:
        shown = info.shards[:3] + (["..."] if len(info.shards) > 3 else [])
        rows.append(("shards", ", ".join(shown)))
    if info.kind != "folder":
        rows.append(("checksums", "xxh3_64 per record" if info.checksums else
                     "none (packed before format version 2: pack again to add them)"))
    rows += [
        ("records", f"{info.count:,}"),
        ("classes", ", ".join(f"{len(c):,} ({name})" for name, c in info.class_lists.items())
         if len(info.class_lists) > 1 else f"{len(info.classes):,}"),
        ("fields", describe_fields(info.fields)),
        ("image bytes", f"{human_bytes(info.image_bytes)} total, {human_bytes(info.mean_image_bytes)} mean"),
    ]
    for name, stats in (("height", info.height), ("width", info.width)):
        if stats is not None:
            rows.append((name, f"min {stats.min}, median {stats.median:g}, max {stats.max}"))
    if info.labels_out_of_range:
        rows.append(("bad labels", f"{info.labels_out_of_range:,} record(s) name no class "
                                   "(run `feedline verify`)"))
    if info.jpeg_warnings:
        rows.append(("jpeg warnings", f"{info.jpeg_warnings:,} record(s) decode with a harmless libjpeg warning "
                                      "(extraneous bytes, a bad ICC or EXIF segment): the image decodes to the end"))
    if info.pack_options:
        rows.append(("pack options", ", ".join(f"{k}={v}" for k, v in sorted(info.pack_options.items()))))
    for name, value in (("source", info.source), ("created", info.created),
                        ("feedline", info.feedline_version)):
        if value is not None:
            rows.append((name, str(value)))
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lists = info.class_lists or {"": info.classes}
    for name, classes in lists.items():
        if not classes:
            continue
        lines.append("")
        if len(lists) > 1:
            lines.append(f"{name}: {len(classes):,} classes")
        lines += _class_table(classes, max_classes)
    return "\n".join(lines)


def _class_table(classes: list[ClassCount], max_classes: int) -> list[str]:
    shown = classes[:max_classes]
    name_width = max(len("class"), *(len(c.name) for c in shown))
    lines = [f"  {'label':>5}  {'class':<{name_width}}  {'records':>9}"]
    lines.extend(f"  {c.label:>5}  {c.name:<{name_width}}  {c.count:>9,}" for c in shown)
    if len(classes) > max_classes:
        lines.append(f"  ... {len(classes) - max_classes:,} more (use --json for all)")
    return lines
