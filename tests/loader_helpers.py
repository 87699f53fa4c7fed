"""What the loader tests build: a small FeedLoader over a packed store."""
from __future__ import annotations

from feedline import FeedLoader


def small(path, **kw) -> FeedLoader:
    options = dict(batch_size=10, shuffle=True, train=True, size=32, num_workers=2, device="cpu", seed=7, decoder="opencv")
    options.update(kw)
    return FeedLoader(str(path), **options)
