"""The decoder registry: backends by name, each imported only when asked for.

``get_decoder("nvimgcodec" | "turbojpeg" | "opencv" | "pil" | "auto")`` builds a per-image decoder;
``resolve_decoder(name, device)`` turns a loader's ``decoder=`` option into the
backend it will use ("dali" included: a GPU pipeline, not a per-image decoder);
``available_decoders()`` says which backends work here, and how to install the others;
``damage_detection(name)`` what a backend does with damaged JPEG data by default.
Importing this package imports no backend library, nor numpy.
"""
from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, NamedTuple

from ..errors import BackendUnavailable

if TYPE_CHECKING:
    from .base import Box, Decoder

log = logging.getLogger(__name__)


class _Backend(NamedTuple):
    module: str     # feedline's module, relative to this package
    cls: str
    library: str    # the import name of the library it needs
    package: str    # what people call that library
    install: str
    damage: str     # what it does, by default, with a JPEG whose image data is damaged


_STRICT = "a DecodeError: libjpeg's warnings (corrupt data, premature end) are errors"
_BACKENDS = {
    "nvimgcodec": _Backend(".nvimgcodec_decoder", "NvimgcodecDecoder", "nvidia.nvimgcodec", "nvImageCodec",
                           "pip install nvidia-nvimgcodec-cu13 (Linux)",
                           _STRICT + " (through its strict partner, simplejpeg or PyTurboJPEG; without one, "
                                     "only a cut-short file is detected)"),
    "turbojpeg": _Backend(".turbojpeg_decoder", "TurbojpegDecoder", "turbojpeg", "PyTurboJPEG",
                          "pip install '.[turbojpeg]' from a clone of feedline (PyTurboJPEG<2), "
                          "and the system library: sudo apt-get install libturbojpeg0", _STRICT),
    "opencv": _Backend(".opencv_decoder", "OpencvDecoder", "cv2", "OpenCV",
                       "pip install opencv-python-headless",
                       "a cut-short file is a DecodeError; corrupt data inside is NOT detected "
                       "(cv2.imdecode ignores libjpeg's warnings)"),
    "pil": _Backend(".pil_decoder", "PilDecoder", "PIL", "Pillow", "pip install pillow",
                    "a cut-short file is a DecodeError; corrupt data inside is NOT detected "
                    "(Pillow ignores libjpeg's warnings)"),
}
_DALI = _Backend("", "", "nvidia.dali", "NVIDIA DALI",
                 "pip install nvidia-dali-cuda130 (or pip install '.[dali]' from a clone of feedline: "
                 "there is no feedline package on PyPI)", "")
_CPU_PREFERENCE = ("nvimgcodec", "turbojpeg", "opencv", "pil")   # what "auto" picks on a CPU, best first
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
    (e.g. ``fast_dct=True``, or ``strict=False`` for nvimgcodec and turbojpeg). Raises BackendUnavailable,
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

    "auto" is "dali" on a CUDA device when DALI imports, else the first CPU backend that
    loads among nvimgcodec, turbojpeg, opencv, pil. An explicit name is checked: unknown ->
    ValueError, missing library -> BackendUnavailable; "dali" off CUDA runs DALI CPU-only.
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
    try:
        # The backend's module imports its library (nvImageCodec quietly), so a library that
        # is missing or broken shows here; asking importlib first would print nvImageCodec's noise.
        module = importlib.import_module(backend.module, __package__)
    except ImportError:
        reason = missing_library_reason(backend.library, backend.package, backend.install)
        raise BackendUnavailable(reason or f"{backend.package} does not import: {backend.install}") from None
    return getattr(module, backend.cls)(**options)


def damage_detection(name: str) -> str:
    """What backend ``name`` does, by default, with a JPEG whose headers are valid and whose
    image data is damaged (cut short, or corrupt inside)."""
    _check_name(name)
    if name in ("auto", "dali"):
        raise ValueError(f"damage_detection needs a per-image backend name, got {name!r}")
    return _BACKENDS[name].damage


def _first_usable(names: tuple[str, ...], asked: str) -> str:
    reasons = []
    for name in names:
        try:
            decoder = _build(name)
        except BackendUnavailable as exc:
            reasons.append(f"{name} unavailable: {exc}")
            continue
        _log_choice(asked, name, "; ".join([repr(decoder), *reasons]))
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


def __getattr__(name: str):
    # Box and Decoder live in .base, which imports numpy: loaded on first use, so that the
    # CLI can read NAMES without numpy.
    if name in ("Box", "Decoder"):
        from . import base
        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Box", "Decoder", "NAMES", "available_decoders", "damage_detection", "get_decoder",
           "missing_library_reason", "resolve_decoder"]
