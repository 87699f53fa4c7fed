"""`pack --check decode`: decode each JPEG that is stored as it is, strictly.

The header check (`normalize`) cannot see damage inside a JPEG's entropy-coded data:
libjpeg-turbo decodes it with a warning into a partly gray image. This check decodes
with the decoder registry's "auto" backend in its strict mode, where such a warning is
an error, and skips the file as corrupt. A benign warning (extraneous bytes, a bad ICC
or EXIF segment: every pixel decodes) keeps the file and is counted in the metadata. Off by default: it costs a full decode per
file. Runs on the pack's thread pool (the decoders release the GIL).
"""
from __future__ import annotations

from typing import NamedTuple

from feedline.decoders import jpeg_warnings

from .records import Record
from .report import Skip, SkipReason


class DecodeCheck(NamedTuple):
    """A record stored as it is, waiting for its decode check."""

    rel: str
    record: Record


class DecodeChecker:
    """Thread-safe: the registry's decoders are."""

    def __init__(self, decoder: str = "auto"):
        from feedline.dataset.verify import strict_decoder  # only packs that decode pay for the decoders
        self.decoder = strict_decoder(decoder)

    def __call__(self, job: DecodeCheck) -> Record | Skip:
        record = job.record
        jpeg_warnings.take()   # nothing left over from an earlier decode on this thread
        try:
            image = self.decoder.decode(record.data)
        except Exception as exc:  # noqa: BLE001 -- any failure on untrusted bytes makes the file bad
            return Skip(job.rel, SkipReason.CORRUPT, f"damaged image data: {self.decoder.name} (strict) "
                                                     f"cannot decode it: {exc}")
        shape = getattr(image, "shape", (0, 0))
        if (int(shape[0]), int(shape[1])) != (record.height, record.width):
            return Skip(job.rel, SkipReason.CORRUPT, f"decodes to {shape[0]}x{shape[1]}, its header says "
                                                     f"{record.height}x{record.width}")
        warning = jpeg_warnings.take()
        return record if warning is None else record._replace(warning=warning)
