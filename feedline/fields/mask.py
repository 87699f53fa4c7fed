"""``mask``: a segmentation mask per record, class indices per pixel. In a labels file, the path
of a single-channel PNG (8- or 16-bit; a palette PNG's indices), relative to the image folder,
the size of its image (in the frame ``--labels-frame`` says, as boxes). Packed beside the
image, losslessly (`feedline.dataset.mask_codec`), checked at pack time; stored column
``mask_checksums`` uint64[n] (each stored mask's xxh3_64, checked on every read); spec
``{"codec": "deflate-rows", "bits": 8 or 16, "values": the distinct values of all masks}``
(an image folder read as it is: ``{"codec": "png"}``).

In a batch: (B, H, W) in output pixels, int64 unless ``OutputSpec(mask_dtype=...)`` asks for
uint8, int16 or int32. The workers make it with the pixels (``per_pixel``), through the same
crop, resize and flip with nearest sampling (`feedline.dataset.mask_sampling`) and every geometric
per-sample op on the same index maps; areas outside the image, erased or cut out are
``AugmentSpec(ignore_index=255)``. A mixer that blends (MixUp) is refused: a class cannot be
half one and half another; CutMix pastes the partner's mask with its pixels."""
from __future__ import annotations

import posixpath

from .base import BLENDING, Field, FieldsError
from .lazy_numpy import np

STORED_CODEC = "deflate-rows"   # how a pack stores masks (`feedline.dataset.mask_codec`)
CODECS = (STORED_CODEC, "png")


class Mask(Field):
    name = "mask"
    columns = {"mask_checksums": "<u8"}
    spec_keys = {"codec": str}
    optional_keys = {"bits": int, "values": list}
    refuses = frozenset({BLENDING})
    in_pixels = True
    per_pixel = True
    files = True
    header_words = ("mask_path", "segmentation")
    example = '"mask": "masks/1.png"'
    task = "segment"

    @classmethod
    def check_spec(cls, spec) -> dict:
        spec = super().check_spec(spec)
        if spec["codec"] not in CODECS:
            raise FieldsError(f"field 'mask': codec {spec['codec']!r} is not one of {', '.join(CODECS)}")
        if spec.get("bits", 8) not in (8, 16):
            raise FieldsError(f"field 'mask': bits {spec['bits']!r} is not 8 or 16")
        values = spec.get("values", [])
        if (any(isinstance(v, bool) or not isinstance(v, int) for v in values) or values != sorted(set(values))
                or (values and not 0 <= values[0] <= values[-1] < 1 << spec.get("bits", 16))):
            raise FieldsError(f"field 'mask': values {values!r} are not distinct class indices in order")
        return spec

    @classmethod
    def joined_spec(cls, specs: list[dict]) -> dict:
        joined = dict(specs[0])
        if all("values" in s for s in specs):
            joined["values"] = sorted(set().union(*(s["values"] for s in specs)))
            joined["bits"] = max(s["bits"] for s in specs)
        return joined

    def classes_beside(self, ignore_index: int) -> int:
        """How many classes a model learns: the largest value but ``ignore_index``, plus one."""
        learnt = [v for v in self.spec.get("values", []) if v != ignore_index]
        return max(learnt) + 1 if learnt else 0

    # -- a labels file ----------------------------------------------------------------------------

    @classmethod
    def parse(cls, parser, value, line: int) -> str:
        if not isinstance(value, str) or not value.strip():
            raise parser.fail(line, f"mask {value!r} is not a file name: write the path of the image's mask "
                                    "(a single-channel PNG), relative to the image folder")
        rel = posixpath.normpath(value.strip().replace("\\", "/"))
        if rel == ".." or rel.startswith(("../", "/")):
            raise parser.fail(line, f"mask {value!r} is not a path inside the image folder; write paths "
                                    "relative to it")
        return rel

    @classmethod
    def build(cls, parser, lines, parsed, index):
        return {"codec": "png"}, {"mask_checksums": np.zeros(len(parsed), dtype=np.uint64)}

    # -- its column -------------------------------------------------------------------------------

    def check_columns(self, a, n):
        if len(a["mask_checksums"]) != n:
            raise FieldsError(f"mask_checksums: {len(a['mask_checksums'])} values for {n} records")

    def take(self, a, idx, n):
        return {"mask_checksums": a["mask_checksums"][idx]}

    def record(self, a, i, n):
        return None   # the mask itself is the store's to read (`Store.mask`)

    def batch_layout(self, b):
        return {}     # made by the workers, beside the pixels (per_pixel)

    def fill(self, a, idx, out, n, geometry):
        pass

    # -- info, verify, pack -----------------------------------------------------------------------

    def stats(self, a, n):
        return {"codec": self.spec["codec"], "bits": self.spec.get("bits"), "values": self.spec.get("values")}

    @classmethod
    def describe(cls, stats):
        values = stats.get("values")
        if values is None:
            return "mask (PNG files, read as they are)"
        shown = ", ".join(map(str, values[:12])) + (f", ... ({len(values)} values)" if len(values) > 12 else "")
        return f"mask ({stats['bits']}-bit class indices: {shown or 'none'})"

    def problems(self, a, n, sizes, frame: str = ""):
        return []   # a mask's problems are in its pixels: pack and verify decode it

    def annotated(self, a, n):
        return np.ones(n, dtype=bool)   # every record's mask is in pixels


KIND = Mask   # what the registry lists
