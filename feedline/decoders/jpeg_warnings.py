"""Which libjpeg warnings damage pixels, and which only say that a good image was written
untidily: the one place the strict decoders, `pack --check decode` and `verify` ask.

libjpeg (and libjpeg-turbo) warns and carries on. Some warnings mean image data is
missing or wrong, and the decoder fills in gray or garbage: those make a record bad.
Others leave every pixel decoded: bytes skipped between segments (an EXIF or ICC segment
whose length is wrong), an odd metadata segment (a bad ICC marker, an unknown JFIF
revision or Adobe transform), or bytes skipped before a restart marker, after which
libjpeg resynchronises and decodes on to the end (Pillow's hopper_bad_exif.jpg: "1214
extraneous bytes before marker 0xd0"). Those records are good; the warning is counted.
Bytes left over before the end-of-image marker (0xd9) are damage: the entropy-coded
data did not end where it should (bytes flipped inside it, typically). A message not
known here counts as damage: a strict decoder errs on the safe side.

Limits, both libjpeg's: the strict decoders stop at the first warning, so a benign first
warning followed by a damaging one later in the file is not seen (libjpeg reports only
its first); and damage inside one restart interval can show only as extraneous bytes
before the next restart marker, which nothing in libjpeg tells apart from
hopper_bad_exif's kind. Damage after packing is still caught by the record's checksum.

``note`` and ``take`` pass the benign warning of the last decode on this thread from a
decoder to whoever counts them (verify, the pack's decode check), without changing the
decoder interface.
"""
from __future__ import annotations

import re
import threading

# Substrings of libjpeg's messages (jerror.h) for the warnings that leave the pixels whole.
BENIGN = (
    "extraneous bytes before marker",       # JWRN_EXTRANEOUS_DATA, except before EOI (below)
    "bad ICC marker",                       # JWRN_BOGUS_ICC: a colour profile chunk out of order
    "unknown JFIF revision",                # JWRN_JFIF_MAJOR
    "Unknown Adobe color transform",        # JWRN_ADOBE_XFORM
)
# For the record, the ones that damage pixels: "N extraneous bytes before marker 0xd9", "Premature end of JPEG file" (JWRN_JPEG_EOF),
# "premature end of data segment" (JWRN_HIT_MARKER), "bad Huffman code" (JWRN_HUFF_BAD_CODE),
# "bad arithmetic code", "found marker 0x.. instead of RST.." (JWRN_MUST_RESYNC),
# "Inconsistent progression sequence" (JWRN_BOGUS_PROGRESSION).

_LEFT_BEFORE_EOI = re.compile(r"extraneous bytes before marker 0x[dD]9\b")
_last = threading.local()


def is_benign(message: str) -> bool:
    """True when libjpeg's warning ``message`` leaves every pixel decoded."""
    if _LEFT_BEFORE_EOI.search(message):  # the scan's data did not end at its end
        return False
    return any(known in message for known in BENIGN)


def note(message: str) -> None:
    """Remember that this thread's current decode met the benign warning ``message``."""
    _last.message = message


def take() -> str | None:
    """The benign warning of this thread's last decode (None when it had none), forgotten."""
    message = getattr(_last, "message", None)
    _last.message = None
    return message
