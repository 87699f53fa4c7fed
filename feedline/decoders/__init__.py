"""Per-image decoders: bytes (or a spliced crop) -> uint8 RGB image, one backend per module.

``get_decoder(name, **options)`` builds one: a registered name (nvimgcodec, turbojpeg,
simplejpeg, opencv, pil, or one of your own) or "auto" (the best strict one present,
as feedline.decoders.selection decides); ``register_decoder(name, factory)`` adds your own;
``decoder_names()`` lists them; ``available_decoders()`` says which work here, and how
to install the others; ``damage_detection(name)`` what one does with damaged JPEG data.
Importing this package imports no backend library, nor numpy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import BackendUnavailable
from .registry import missing_library_reason, names, register_decoder, registration, unregister_decoder

if TYPE_CHECKING:
    from .base import Box, Decoder


def get_decoder(name: str, **options) -> Decoder:
    """A new per-image decoder. ``options`` go to the backend's constructor (e.g.
    ``fast_dct=True``, or ``strict=False`` for nvimgcodec and turbojpeg). Raises
    BackendUnavailable, naming what to install, when the backend's library is missing."""
    from .selection import decoder_by_name
    return decoder_by_name(name, **options)


def decoder_names() -> tuple[str, ...]:
    """Every registered decoder name (built-in ones first), "auto" not included."""
    return names()


def available_decoders() -> dict[str, str | None]:
    """Every registered decoder name -> None if it builds here, else the reason and how to fix it."""
    result: dict[str, str | None] = {}
    for name in names():
        try:
            registration(name).factory()
            result[name] = None
        except BackendUnavailable as exc:
            result[name] = str(exc)
    return result


def damage_detection(name: str) -> str:
    """What decoder ``name`` does, by default, with a JPEG whose headers are valid and whose
    image data is damaged (cut short, or corrupt inside)."""
    if name == "auto":
        raise ValueError("damage_detection needs a decoder's name, got 'auto'")
    return registration(name).damage


def __getattr__(name: str):
    # Box and Decoder live in .base, which imports numpy: loaded on first use, so that the
    # CLI can read the names without numpy.
    if name in ("Box", "Decoder"):
        from . import base
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Box", "Decoder", "available_decoders", "damage_detection", "decoder_names", "get_decoder",
           "missing_library_reason", "register_decoder", "unregister_decoder"]
