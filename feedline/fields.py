"""The names and specs of a data set's fields, without numpy (the writers' metadata and
`feedline pack`'s start-up need them); their columns as arrays are `feedline.targets`."""
from __future__ import annotations

FIELD_NAMES = ("label", "labels", "target", "boxes")
FIELD_COLUMNS = {"label": ("labels",), "labels": ("label_set_offsets", "label_set_classes"),
                 "target": ("targets",), "boxes": ("box_offsets", "box_coords", "box_classes")}
TARGET_DTYPES = {"labels": "<i8", "label_set_offsets": "<i8", "label_set_classes": "<i4", "targets": "<f4",
                 "box_offsets": "<i8", "box_coords": "<f4", "box_classes": "<i4"}
LABEL_ONLY = {"label": {}}   # the fields of a store packed before fields were stored (versions 1, 2)


class FieldsError(ValueError):
    """Field specs or columns that do not read as this module documents."""


def check_fields(fields) -> dict[str, dict]:
    """``fields`` as stored in the metadata, checked; FieldsError naming what is wrong."""
    if not isinstance(fields, dict) or not fields or any(k not in FIELD_NAMES for k in fields):
        raise FieldsError(f"fields {fields!r}: expected a non-empty object of {', '.join(FIELD_NAMES)}")
    for name, spec in fields.items():
        wanted = {"label": (), "labels": ("max",), "target": ("width", "scalar"), "boxes": ("max",)}[name]
        if not isinstance(spec, dict) or any(not isinstance(spec.get(k), (bool if k == "scalar" else int))
                                             for k in wanted):
            raise FieldsError(f"field {name!r}: spec {spec!r} lacks {', '.join(wanted)}")
    if "target" in fields and (fields["target"]["width"] < 1 or (fields["target"]["scalar"]
                                                                and fields["target"]["width"] != 1)):
        raise FieldsError(f"field 'target': width {fields['target']['width']} is not a valid width")
    return {name: dict(fields[name]) for name in FIELD_NAMES if name in fields}   # in the documented order
