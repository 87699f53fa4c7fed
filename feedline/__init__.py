"""feedline: keep GPUs fed with images.

Pack an image folder into one LMDB or HDF5 file, then stream it back as decoded,
augmented, normalized batches on the GPU with ``FeedLoader``.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import BackendUnavailable, DecodeError, FeedlineError, PackError, StoreError
from .stores import Store, open_dataset


def __getattr__(name: str):
    # FeedLoader pulls in torch; import it only when asked for.
    if name == "FeedLoader":
        from .loader import FeedLoader
        return FeedLoader
    raise AttributeError(f"module 'feedline' has no attribute {name!r}")


__all__ = ["FeedLoader", "open_dataset", "Store", "FeedlineError", "StoreError", "PackError",
           "DecodeError", "BackendUnavailable", "__version__"]
