"""The decoder registry: backends by name, each imported only when asked for.

``get_decoder("turbojpeg" | "opencv" | "pil" | "auto")`` builds a per-image decoder;
``resolve_decoder(name, device)`` turns a loader's ``decoder=`` option into the
backend it will use ("dali" included: a GPU pipeline, not a per-image decoder);
``available_decoders()`` says which backends work here, and how to install the others.
"""
from __future__ import annotations

import importlib
import logging
from typing import NamedTuple

from ..errors import BackendUnavailable
from .base import Box, Decoder

log = logging.getLogger(__name__)


class _Backend(NamedTuple):
    module: str     # feedline's module, relative to this package
    cls: str
    library: str    # the import name of the library it needs
    package: str    # what people call that library
    install: str


_BACKENDS = {
    "turbojpeg": _Backend(".turbojpeg_decoder", "TurbojpegDecoder", "turbojpeg", "PyTurboJPEG",
                          "pip install 'PyTurboJPEG<2'"),
    "opencv": _Backend(".opencv_decoder", "OpencvDecoder", "cv2", "OpenCV",
                       "pip install opencv-python-headless"),
    "pil": _Backend(".pil_decoder", "PilDecoder", "PIL", "Pillow", "pip install pillow"),
}
_DALI = _Backend("", "", "nvidia.dali", "NVIDIA DALI",
                 "pip install nvidia-dali-cuda120 (or pip install 'feedline[dali]')")
_CPU_PREFERENCE = ("turbojpeg", "opencv")   # what "auto" picks on a CPU, best first
NAMES = ("auto", *_BACKENDS, "dali")
_logged: set[tuple[str, str]] = set()


def missing_library_reason(library: str, package: str, install: str) -> str | None:
    """None if ``library`` imports, else why not and how to install it."""
    try:
        importlib.import_module(library)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name is not None and \
                (library == exc.name or library.startswith(exc.name + ".")):
            return f"{package} not installed: {install}"
        return f"{package} is installed but does not import ({exc}): {install}"
    return None


def get_decoder(name: str, **options) -> Decoder:
    """A new per-image decoder. ``options`` go to the backend's constructor
    (e.g. ``fast_dct=True`` or ``strict=True`` for turbojpeg). Raises BackendUnavailable,
    naming what to install, when the backend's library is missing."""
    _check_name(name)
    if name == "dali":
        raise ValueError("decoder 'dali' is not a per-image decoder: DALI decodes whole batches on the "
                         "GPU in its own pipeline. Use it through FeedLoader(..., decoder='dali').")
    if name == "auto":
        name = _first_usable(_CPU_PREFERENCE, "auto")
    try:
        return _build(name, **options)
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"decoder {name!r} is unavailable: {exc}") from None


def resolve_decoder(name: str, device: str) -> str:
    """The backend a loader on ``device`` uses for ``decoder=name``.

    "auto" is "dali" on a CUDA device when DALI imports, else "turbojpeg" when it
    loads, else "opencv". An explicit name is checked: unknown -> ValueError, missing
    library -> BackendUnavailable; "dali" off CUDA runs DALI CPU-only.
    """
    _check_name(name)
    on_cuda = str(device).startswith("cuda")
    if name == "auto":
        if on_cuda and _dali_reason() is None:
            _log_choice("auto", "dali", f"device {device}")
            return "dali"
        return _first_usable(_CPU_PREFERENCE, "auto")
    if name == "dali":
        # Off CUDA, the same DALI pipeline runs CPU-only (CPU operators): slower than
        # turbojpeg threads, but it is how the DALI path is tested without a GPU.
        reason = _dali_reason()
        if reason is not None:
            raise BackendUnavailable(f"decoder 'dali': {reason}")
        return name
    get_decoder(name)  # builds one to check that its library loads
    return name


def available_decoders() -> dict[str, str | None]:
    """Every backend name -> None if it works here, else the reason and how to fix it."""
    result: dict[str, str | None] = {}
    for name in _BACKENDS:
        try:
            _build(name)
            result[name] = None
        except BackendUnavailable as exc:
            result[name] = str(exc)
    result["dali"] = _dali_reason()
    return result


def _check_name(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"unknown decoder {name!r}; known decoders: {', '.join(NAMES)}")


def _build(name: str, **options) -> Decoder:
    """A new ``name`` backend; BackendUnavailable says why not and what to install."""
    backend = _BACKENDS[name]
    reason = missing_library_reason(backend.library, backend.package, backend.install)
    if reason is not None:
        raise BackendUnavailable(reason)
    return getattr(importlib.import_module(backend.module, __package__), backend.cls)(**options)


def _first_usable(names: tuple[str, ...], asked: str) -> str:
    reasons = []
    for name in names:
        try:
            _build(name)
        except BackendUnavailable as exc:
            reasons.append(f"{name} unavailable: {exc}")
            continue
        _log_choice(asked, name, "; ".join(reasons))
        return name
    raise BackendUnavailable("no CPU decoder is usable: " + "; ".join(reasons))


def _log_choice(asked: str, chosen: str, why: str) -> None:
    if (asked, chosen) in _logged:
        return
    _logged.add((asked, chosen))
    if chosen in _CPU_PREFERENCE[1:]:   # a slower fallback: say what to install for the fast one
        log.warning("decoder %r -> %r (%s)", asked, chosen, why)
    else:
        log.info("decoder %r -> %r%s", asked, chosen, f" ({why})" if why else "")


def _dali_reason() -> str | None:
    return missing_library_reason(_DALI.library, _DALI.package, _DALI.install)


__all__ = ["Box", "Decoder", "NAMES", "available_decoders", "get_decoder", "missing_library_reason",
           "resolve_decoder"]
