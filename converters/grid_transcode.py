"""`pack --layout grid`: every record becomes a restart-grid JPEG (a marker after every MCU).

JPEGs stored as they are get transcoded losslessly (`libjpeg_transcode`: the same
coefficients, so the same pixels, as one baseline scan); records pack re-encodes are
transcoded the same way after their encoder, which costs one more transcode on those
rare files and keeps the encoder's settings in one place. Transcoding reads all the
entropy-coded data, so damaged data is found here: libjpeg's warnings (corrupt data,
a premature end) and fatal errors skip the file as corrupt, and a benign warning
(`jpeg_warnings`) keeps the record and is counted, as ``--check decode`` does.
Thread-safe: runs on the pack's thread pool (the library call releases the GIL).
"""
from __future__ import annotations

from feedline.decoders.jpeg_grid import parse_grid
from feedline.core.errors import DecodeError

from .libjpeg_transcode import TranscodeError, transcode_to_grid_warned
from .records import Record
from .report import Skip, SkipReason


class GridTranscoder:
    """Record -> the same record as a grid JPEG, or a Skip; Skips pass through."""

    def __call__(self, rel: str, outcome: Record | Skip) -> Record | Skip:
        if isinstance(outcome, Skip):
            return outcome
        try:
            data, warning = transcode_to_grid_warned(outcome.data)
            parse_grid(data)   # what the loader will check: a wrong transcode fails here, not in training
        except TranscodeError as exc:
            return Skip(rel, SkipReason.CORRUPT, f"damaged image data: libjpeg-turbo cannot transcode it "
                                                 f"to the restart grid: {exc}")
        except DecodeError as exc:
            return Skip(rel, SkipReason.UNSUPPORTED, f"its lossless transcode is not a restart grid ({exc})")
        # The decode check may have met the same warning already: one record, counted once.
        return outcome._replace(data=data, warning=outcome.warning or warning)
