"""feedline: keep GPUs fed with images.

Pack an image folder into one LMDB or HDF5 file, then stream it back as decoded,
augmented, normalized batches on the GPU with ``FeedLoader``.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .core.errors import BackendUnavailable, ChecksumError, DecodeError, FeedlineError, PackError, StoreError

# Imported when first asked for: `import feedline` (and every `feedline --help`) stays
# free of numpy and torch.
_LAZY = {"FeedLoader": ".loading.loader", "open_dataset": ".stores", "Store": ".stores", "AugmentSpec": ".planning.augment",
         "OutputSpec": ".core.config", "TransformSpec": ".core.config", "OrderSpec": ".core.config",
         "normalize": ".sources.normalization"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'feedline' has no attribute {name!r}")


__all__ = ["FeedLoader", "normalize", "open_dataset", "Store", "AugmentSpec", "OutputSpec", "TransformSpec", "OrderSpec", "FeedlineError", "StoreError", "PackError",
           "DecodeError", "ChecksumError", "BackendUnavailable", "__version__"]
