"""Benchmarks comparing decoders and loaders, run by ``feedline bench`` and ``bench/*.py``.

``common`` holds what every benchmark shares (machine description, timing, tables,
JSON, charts), ``data`` prepares the realistic data set, and ``decoders`` / ``loaders``
are the two benchmarks. Nothing here is imported by the library itself.
"""
