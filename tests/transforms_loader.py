"""The loader the transform tests share: every built-in transform and Mixup unless told
otherwise, on 48-pixel crops; and an epoch's batches, cloned."""
from __future__ import annotations

import itertools

from feedline import FeedLoader
from feedline.transforms import (ColorJitter, GaussianBlur, Mixup, RandAugment, RandomErasing, RandomGrayscale,
                                 TransformSpec, TrivialAugmentWide)

SIZE = 48


def every_builtin():
    return [RandAugment(2, 9), TrivialAugmentWide(), ColorJitter(0.4, 0.4, 0.4, 0.1), RandomGrayscale(0.2),
            GaussianBlur(5, (0.1, 2.0)), RandomErasing(0.5)]


def loader(path, threads=2, transforms=None, batch_transforms=None, **kw):
    """A loader with every built-in and Mixup unless told otherwise (``transforms`` may be a
    TransformSpec, which then carries the batch transforms)."""
    if not isinstance(transforms, TransformSpec):
        transforms = TransformSpec(every_builtin() if transforms is None else transforms,
                                   [Mixup(1.0, 1.0)] if batch_transforms is None else batch_transforms)
    options = dict(batch_size=8, shuffle=True, size=SIZE, num_workers=threads, device="cpu", seed=5,
                   decoder="turbojpeg", transforms=transforms)
    options.update(kw)
    return FeedLoader(str(path), **options)


def epoch(feed, n=None):
    """The first ``n`` batches (all when None) of the next iteration, cloned."""
    it = iter(feed)
    return [(x.clone(), y.clone()) for x, y in itertools.islice(it, n)]
