"""The kinds of target a data set's records may carry, one `Field` subclass per module, and the
registry that names them. Everything that handles targets (the labels file, the stores, info,
verify, the batch, the transforms' refusals, the trainer's task) asks these objects; a new kind
is a new module plus its line in ``KIND_MODULES``."""
from __future__ import annotations

from importlib import import_module

from .base import BLENDING, GEOMETRIC, MIXING, Field, FieldsError, Geometry, segments

KIND_MODULES = ("label", "labels", "target", "boxes", "keypoints", "mask")   # the registry, in stored order

KINDS: dict[str, type[Field]] = {kind.name: kind for kind in (import_module(f"{__name__}.{m}").KIND
                                                                for m in KIND_MODULES)}
FIELD_NAMES = tuple(KINDS)
FIELD_COLUMNS = {name: tuple(kind.columns) for name, kind in KINDS.items()}
TARGET_DTYPES = {column: dtype for kind in KINDS.values() for column, dtype in kind.columns.items()}
LABEL_ONLY = {"label": {}}   # the fields of a store packed before fields were stored (versions 1, 2)

__all__ = ["BLENDING", "FIELD_COLUMNS", "FIELD_NAMES", "GEOMETRIC", "KINDS", "LABEL_ONLY", "MIXING", "TARGET_DTYPES", "Field",
           "FieldsError", "Geometry", "check_class_lists", "check_fields", "class_fields", "field_objects",
           "per_pixel", "refusing", "segments"]


def check_fields(fields) -> dict[str, dict]:
    """``fields`` as stored in the metadata, checked; FieldsError naming what is wrong."""
    if not isinstance(fields, dict) or not fields or any(k not in KINDS for k in fields):
        raise FieldsError(f"fields {fields!r}: expected a non-empty object of {', '.join(FIELD_NAMES)}")
    return {name: KINDS[name].check_spec(fields[name]) for name in FIELD_NAMES if name in fields}   # stored order


def check_class_lists(lists, fields: dict) -> dict[str, list[str]]:
    """``class_lists`` as stored in the metadata: one list of names for each field with classes."""
    wanted = class_fields(fields)
    if (not isinstance(lists, dict) or set(lists) != set(wanted)
            or not all(isinstance(v, list) and all(isinstance(c, str) for c in v) for v in lists.values())):
        raise FieldsError(f"class lists {lists!r}: expected one list of names for each of "
                          f"{', '.join(wanted) or 'no field'}")
    return {name: list(lists[name]) for name in wanted}


def field_objects(fields: dict[str, dict], class_lists: dict[str, list[str]] | None = None) -> dict[str, Field]:
    """One object per field, with its own class list."""
    lists = class_lists or {}
    return {name: KINDS[name](spec, lists.get(name)) for name, spec in check_fields(fields).items()}


def class_fields(fields) -> list[str]:
    """The fields (names) that name classes, in stored order."""
    return [name for name in FIELD_NAMES if name in fields and KINDS[name].has_classes]


def per_pixel(fields) -> list[str]:
    """The fields (names) the workers make per pixel with the image (a mask), in stored order."""
    return [name for name in FIELD_NAMES if name in fields and KINDS[name].per_pixel]


def refusing(fields, family: str) -> list[str]:
    """The fields (names) that cannot follow a transform of ``family`` (GEOMETRIC, MIXING)."""
    return [name for name in fields if name in KINDS and family in KINDS[name].refuses]
