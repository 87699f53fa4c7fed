"""numpy, imported on first use: the field kinds' modules are imported by a pack's metadata
writer, and a pack of JPEGs stored as they are must not pay numpy's import."""
from __future__ import annotations


class _LazyNumpy:
    def __getattr__(self, name: str):
        import numpy
        return getattr(numpy, name)


np = _LazyNumpy()
