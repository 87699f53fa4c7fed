"""Who produces the batches (engine=) and which codec the CPU engine runs (decoder=):
both chosen here, and only here.

``resolve_engine_and_decoder(engine, decoder, device, store)`` is what FeedLoader,
``verify`` and the trainer call: "auto" resolved (and logged once), names checked, the
old ``decoder="dali"``/``"gpu"`` spelling accepted with a DeprecationWarning, and the
strict or lenient mode of the decoder picked for the store it will read.
"""
from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.choices import Engine
from .jpeg_grid import is_grid_store
from .registry import build, detects_damage, missing_library_reason, registration
from ..core.errors import BackendUnavailable
from ..fields import per_pixel

if TYPE_CHECKING:
    from .base import Decoder

log = logging.getLogger(__name__)

# What decoder="auto" picks, best first: only decoders that make damaged JPEG data a
# DecodeError. OpenCV and Pillow decode it silently into a wrong image: never picked.
AUTO_PREFERENCE = ("nvimgcodec", "turbojpeg", "simplejpeg")
STRICT_INSTALL = "pip install simplejpeg (or nvidia-nvimgcodec-cu13 with it, or PyTurboJPEG and libturbojpeg0)"
DALI = ("nvidia.dali", "NVIDIA DALI", "pip install nvidia-dali-cuda130 (or pip install '.[dali]' from a clone "
        "of feedline: there is no feedline package on PyPI)")
_logged: set[tuple[str, int]] = set()


@dataclass(frozen=True)
class Selection:
    """The engine, and for the CPU engine the per-image decoder its workers run."""

    engine: Engine                  # threads, dali or gpu: never auto
    decoder: "Decoder | None"       # the CPU engine's decoder; None for dali and gpu

    @property
    def decoder_name(self) -> str | None:
        if self.decoder is None:
            return None
        return getattr(self.decoder, "name", type(self.decoder).__name__)


def resolve_engine_and_decoder(engine="auto", decoder="auto", device: str = "cpu", store=None, *,
                               strict: bool | None = None, log_level: int = logging.INFO,
                               num_workers: int | str = "auto") -> Selection:
    """The engine and decoder a loader on ``device`` reading ``store`` uses.

    ``engine``: "auto" is "dali" on a CUDA device when DALI imports, no decoder is named and
    the store has no masks, else "processes" (worker processes, each with its own GIL: the per-image Python
    scales with the cores), or "threads" for ``num_workers=0`` (DataLoader's "decode in this
    process", where a debugger can follow a transform). ``decoder``: a registered name, "auto", or a Decoder instance
    (used as it is). ``strict=None`` is the loader's rule (strict, unless ``store`` proves
    at pack time that every record decodes: then the faster lenient region decode);
    ``strict=True`` is verify's (strict mode wherever the decoder has one). Unknown
    names are ValueErrors, missing libraries BackendUnavailable saying what to install.
    """
    engine, decoder = check_names(engine, decoder)
    device = str(device)
    if engine is Engine.AUTO:
        masks = store is not None and bool(per_pixel(store.fields))   # DALI's pipeline makes no masks
        engine = _auto_engine(decoder, device, log_level, in_process=num_workers == 0, masks=masks)
    if engine in (Engine.THREADS, Engine.PROCESSES):   # the same per-image decoder, on threads or in workers
        return Selection(engine, per_image_decoder(decoder, store, strict, log_level))
    if engine is Engine.GPU and not device.startswith("cuda"):
        raise BackendUnavailable("engine='gpu' decodes on a CUDA device; pass device='cuda' "
                                 "(or decode on CPU threads: engine='threads')")
    if engine is Engine.DALI:
        reason = missing_library_reason(*DALI)
        if reason is not None:
            raise BackendUnavailable(f"engine 'dali': {reason}")
    return Selection(engine, None)


def check_names(engine, decoder):
    """(Engine, decoder) after the checks that build nothing: the old decoder="dali"/"gpu"
    turned into engine= (with a DeprecationWarning), the engine parsed, a decoder name
    known to the registry, and no decoder named beside an engine that decodes on its own."""
    engine, decoder = _split_deprecated(engine, decoder)
    engine = Engine.parse(engine, "engine")
    named = not (isinstance(decoder, str) and decoder == "auto")
    if isinstance(decoder, str) and named:
        registration(decoder)
    if named and engine in (Engine.DALI, Engine.GPU):
        raise ValueError(f"engine={engine.value!r} decodes in its own pipeline, so decoder={decoder!r} has no "
                         "effect; leave decoder unset, or pass engine='threads' to run that decoder")
    return engine, decoder


def per_image_decoder(decoder, store=None, strict: bool | None = None, log_level: int = logging.INFO) -> "Decoder":
    """The per-image decoder for ``decoder=`` (a name, "auto", or a Decoder used as it is)
    reading ``store``: with the loader's rule (``strict=None``) a grid store's GridDecoder
    (its crops spliced and decoded alone, strictly), else the lenient region decode on a
    store decoded at pack time, else the decoder in its strict mode."""
    from .base import Decoder
    if isinstance(decoder, Decoder):
        return decoder
    if not isinstance(decoder, str):
        raise TypeError(f"decoder must be a decoder's name or a Decoder, got {type(decoder).__name__}")
    name = auto_decoder_name(log_level) if decoder == "auto" else decoder
    if strict is None and is_grid_store(store):   # a lenient region decode would go unused
        from .grid_decoder import grid_decoder_for
        return grid_decoder_for(store, _build(name))
    if strict is None and decoded_at_pack(store) and registration(name).lenient_region:
        log.log(log_level, "%s: decoded cleanly at pack time and checksummed: decoding with %s leniently "
                "(only the crop's region)", store.filename, name)
        return _build(name, strict=False)
    built = _build(name)
    if strict and getattr(built, "strict", None) is False:
        return _build(name, strict=True)
    if strict and not getattr(built, "strict", False):
        log.info("decoder %r has no strict mode: damaged image data may pass as decoded", name)
    return built


def decoder_by_name(name: str, **options) -> "Decoder":
    """``feedline.decoders.get_decoder``: a new decoder ``name`` ("auto": the best strict one;
    an engine's name is a ValueError that says to pass it as engine=, from the registry)."""
    return _build(auto_decoder_name(logging.INFO) if name == "auto" else name, **options)


def auto_decoder_name(log_level: int = logging.INFO) -> str:
    """The first decoder of AUTO_PREFERENCE that builds here and detects damaged data."""
    reasons = []
    for name in AUTO_PREFERENCE:
        try:
            decoder = build(name)
        except BackendUnavailable as exc:
            reasons.append(f"{name} unavailable: {exc}")
            continue
        if not detects_damage(name):
            reasons.append(f"{name} cannot detect damaged data here (no strict partner)")
            continue
        fallback = name != AUTO_PREFERENCE[0]  # a slower one: say what to install for the fast one
        _log_once(logging.WARNING if fallback else log_level,
                  f"decoder 'auto' -> {name!r} ({'; '.join([repr(decoder), *reasons])})")
        return name
    raise BackendUnavailable("no decoder that detects damaged JPEG data is installed (" + "; ".join(reasons) +
                             f"). Install one: {STRICT_INSTALL}; or pass decoder='opencv' or 'pil' to decode "
                             "without detecting damaged data")


def decoded_at_pack(store) -> bool:
    """Whether every record was decoded cleanly when packed (``pack --check decode``) and is
    checked against its checksum on every read: its bytes are then known to decode."""
    if store is None:
        return False
    options = store.meta.get("pack_options") or {}
    return getattr(store, "checksums", None) is not None and options.get("check") == "decode"


def _build(name: str, **options) -> "Decoder":
    try:
        return build(name, **options)
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"decoder {name!r} is unavailable: {exc}") from None


def _auto_engine(decoder, device: str, log_level: int, in_process: bool, masks: bool = False) -> Engine:
    cpu = Engine.THREADS if in_process else Engine.PROCESSES
    if not (isinstance(decoder, str) and decoder == "auto"):
        return cpu   # a decoder was named: the per-image engine runs it
    if not device.startswith("cuda") or masks:
        return cpu
    reason = missing_library_reason(*DALI)
    if reason is None:
        _log_once(log_level, f"engine 'auto' -> 'dali' (device {device})")
        return Engine.DALI
    _log_once(log_level, f"engine 'auto' -> '{cpu.value}' (device {device}; {reason})")
    return cpu


def _split_deprecated(engine, decoder):
    """The old spelling decoder="dali" / "gpu" (engines, not decoders): engine=, with a warning."""
    if not (isinstance(decoder, str) and decoder.lower() in ("dali", "gpu")):
        return engine, decoder
    old = decoder.lower()
    warnings.warn(f"decoder={old!r} is deprecated: DALI and the GPU decoder are engines; pass engine={old!r}",
                  DeprecationWarning, stacklevel=5)
    if Engine.parse(engine, "engine") not in (Engine.AUTO, Engine(old)):
        raise ValueError(f"engine={str(engine)!r} and decoder={old!r} disagree; pass engine={old!r} alone")
    return old, "auto"


def _log_once(level: int, message: str) -> None:
    if (message, level) not in _logged:
        _logged.add((message, level))
        log.log(level, "%s", message)


__all__ = ["AUTO_PREFERENCE", "Selection", "auto_decoder_name", "check_names", "decoded_at_pack", "decoder_by_name",
           "resolve_engine_and_decoder", "per_image_decoder"]
