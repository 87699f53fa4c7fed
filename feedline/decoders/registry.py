"""The open decoder registry: per-image decoders by name.

Built-in backends are registered here by module path and imported only when built, so
that reading the names costs no import. ``register_decoder(name, factory)`` adds a
user's decoder; so do installed packages that declare a ``feedline.decoders`` entry
point (``name = "package.module:Factory"``), which is how ``feedline verify --decoder
NAME`` and the bench scripts find a decoder registered outside their process.

Which decoder ``"auto"`` means is not decided here: that is feedline.decoders.selection's job.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..core.errors import BackendUnavailable

if TYPE_CHECKING:
    from .base import Decoder

ENTRY_POINT_GROUP = "feedline.decoders"
RESERVED = ("auto", "threads", "dali", "gpu")   # "auto" and the engines: never decoder names

STRICT = "a DecodeError: libjpeg's warnings (corrupt data, premature end) are errors"
LENIENT = ("a cut-short file is a DecodeError; corrupt data inside is NOT detected "
           "({} ignores libjpeg's warnings)")


@dataclass(frozen=True)
class Registration:
    """One decoder: how to build it and what it promises about damaged JPEG data."""

    name: str
    factory: Callable[..., "Decoder"]   # options -> a new Decoder; BackendUnavailable when it cannot
    detects_damage: bool    # by default, damaged entropy-coded data is a DecodeError
    lenient_region: bool    # takes strict=False and then decodes only the crop's region (faster)
    damage: str             # what it does with a JPEG whose image data is damaged, in words
    needs: tuple[str, ...] = ()   # other decoders whose presence makes detects_damage true


_registry: dict[str, Registration] = {}
_lock = threading.Lock()
_entry_points_loaded = False


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


def register_decoder(name: str, factory: Callable[..., "Decoder"], *, detects_damage: bool = False,
                     damage: str | None = None, replace: bool = False) -> None:
    """Make ``factory`` (a Decoder subclass, or any callable returning a Decoder; it gets the
    keyword options of ``get_decoder(name, **options)``) usable as ``decoder=name`` in
    FeedLoader, ``verify`` and the bench. ``detects_damage=True`` promises that damaged
    JPEG data is a DecodeError, never a silently wrong image. A name already taken
    needs ``replace=True``."""
    if not isinstance(name, str) or not name.isidentifier() or name.lower() != name:
        raise ValueError(f"a decoder name is a lowercase identifier such as 'mydecoder', got {name!r}")
    if name in RESERVED:
        raise ValueError(f"{name!r} is not a decoder name: 'auto' picks one, and 'threads', 'dali', 'gpu' "
                         "are engines (engine=); register your decoder under its own name")
    if not callable(factory):
        raise TypeError(f"factory must be a Decoder subclass or a callable returning a Decoder, "
                        f"got {type(factory).__name__}")
    with _lock:
        if name in _registry and not replace and _registry[name].factory is not factory:
            raise ValueError(f"decoder {name!r} is already registered; pass replace=True to replace it")
        _registry[name] = Registration(name, factory, detects_damage, False,
                                       damage or ("a DecodeError" if detects_damage else
                                                  "not stated (a decoder registered by its user)"))


def unregister_decoder(name: str) -> None:
    """Forget a user's decoder (built-in ones stay)."""
    with _lock:
        if name in _BUILT_IN or name not in _registry:
            raise ValueError(f"{name!r} is not a registered user decoder")
        del _registry[name]


def registration(name: str) -> Registration:
    """The registration of ``name``; ValueError naming the known ones."""
    found = _registry.get(name)
    if found is None:
        load_entry_points()
        found = _registry.get(name)
    if found is None:
        engine = f" ({name!r} is an engine: FeedLoader(..., engine={name!r}))" if name in RESERVED[1:] else ""
        raise ValueError(f"unknown decoder {name!r}{engine}; known decoders: {', '.join(('auto', *names()))}")
    return found


def names(installed: bool = True) -> tuple[str, ...]:
    """Every registered decoder name, built-in ones first; ``installed=False`` leaves out the
    installed packages' entry points not yet loaded (no scan of the installed packages)."""
    if installed:
        load_entry_points()
    return tuple(_registry)


def build(name: str, **options) -> "Decoder":
    """A new decoder ``name`` built with ``options``; BackendUnavailable says why not."""
    return registration(name).factory(**options)


def usable(name: str) -> bool:
    try:
        build(name)
    except BackendUnavailable:
        return False
    return True


def detects_damage(name: str) -> bool:
    """Whether decoder ``name`` as built here, by default, makes damaged data a DecodeError."""
    entry = registration(name)
    if entry.needs:
        return entry.detects_damage and any(usable(n) for n in entry.needs)
    return entry.detects_damage


def load_entry_points() -> None:
    """Register the decoders that installed packages declare, once per process."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in _registry:
            register_decoder(point.name, _deferred(point))


def _deferred(point) -> Callable[..., "Decoder"]:
    """A factory that imports an entry point's object only when a decoder is built."""
    def factory(**options):
        try:
            target = point.load()
        except ImportError as exc:
            raise BackendUnavailable(f"decoder {point.name!r} ({point.value}) does not import: {exc}") from None
        return target(**options)
    return factory


def _built_in(module: str, cls: str, library: str, package: str, install: str) -> Callable[..., "Decoder"]:
    def factory(**options):
        try:
            # The backend's module imports its library (nvImageCodec quietly), so a library that
            # is missing or broken shows here; asking importlib first would print nvImageCodec's noise.
            loaded = importlib.import_module(module, __package__)
        except ImportError:
            reason = missing_library_reason(library, package, install)
            raise BackendUnavailable(reason or f"{package} does not import: {install}") from None
        return getattr(loaded, cls)(**options)
    return factory


_BUILT_IN = {
    "nvimgcodec": Registration(
        "nvimgcodec", _built_in(".nvimgcodec_decoder", "NvimgcodecDecoder", "nvidia.nvimgcodec", "nvImageCodec",
                                "pip install nvidia-nvimgcodec-cu13 (Linux)"),
        True, True, STRICT + " (through its strict partner, simplejpeg or PyTurboJPEG; without one, "
                             "only a cut-short file is detected)", needs=("simplejpeg", "turbojpeg")),
    "turbojpeg": Registration(
        "turbojpeg", _built_in(".turbojpeg_decoder", "TurbojpegDecoder", "turbojpeg", "PyTurboJPEG",
                               "pip install '.[turbojpeg]' from a clone of feedline (PyTurboJPEG<2), "
                               "and the system library: sudo apt-get install libturbojpeg0"),
        True, True, STRICT),
    "simplejpeg": Registration(
        "simplejpeg", _built_in(".simplejpeg_decoder", "SimplejpegDecoder", "simplejpeg", "simplejpeg",
                                "pip install simplejpeg"),
        True, False, STRICT),
    "opencv": Registration(
        "opencv", _built_in(".opencv_decoder", "OpencvDecoder", "cv2", "OpenCV", "pip install opencv-python-headless"),
        False, False, LENIENT.format("cv2.imdecode")),
    "pil": Registration(
        "pil", _built_in(".pil_decoder", "PilDecoder", "PIL", "Pillow", "pip install pillow"),
        False, False, LENIENT.format("Pillow")),
}
_registry.update(_BUILT_IN)
