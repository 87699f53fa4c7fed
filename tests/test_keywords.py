"""feedline.keywords: FeedLoader's keywords as specs, and the keywords that moved into a spec
refused by name."""
from __future__ import annotations

import pytest

from feedline import FeedLoader


def loader(path, **kw) -> FeedLoader:
    return FeedLoader(str(path), **{"batch_size": 8, "device": "cpu", "num_workers": 1, "decoder": "opencv", **kw})


@pytest.mark.parametrize("keyword, value, spec", [
    ("scale", (0.5, 1.0), r"augment=AugmentSpec\(scale=\.\.\.\)"),
    ("ratio", (0.5, 2.0), r"augment=AugmentSpec\(ratio=\.\.\.\)"),
    ("crop_fraction", 0.9, r"augment=AugmentSpec\(crop_fraction=\.\.\.\)"),
    ("flip", False, r"augment=AugmentSpec\(flip=\.\.\.\)"),
    ("min_box_visibility", 0.5, r"augment=AugmentSpec\(min_box_visibility=\.\.\.\)"),
    ("channels_last", False, r"output=OutputSpec\(channels_last=\.\.\.\)"),
    ("batch_transforms", [], r"transforms=TransformSpec\(transforms=\[\.\.\.\], batch_transforms=\.\.\.\)"),
    ("quasi_random", (4, 4), r"order=OrderSpec\('quasi-random', quasi_random=\.\.\.\)"),
    ("even_shards", False, r"order=OrderSpec\(\.\.\., even_shards=\.\.\.\)"),
    ("rank", 0, r"order=OrderSpec\(\.\.\., rank=\.\.\., world_size=\.\.\.\)"),
    ("world_size", 1, r"order=OrderSpec\(\.\.\., rank=\.\.\., world_size=\.\.\.\)"),
    ("num_threads", 2, r"num_workers=\.\.\. \(the decode threads"),
])
def test_a_keyword_that_moved_into_a_spec_names_the_spec(packed_lmdb, keyword, value, spec):
    """FeedLoader's keywords that moved into a spec are a TypeError that says where they went
    (before the source is even opened)."""
    with pytest.raises(TypeError, match=rf"FeedLoader\(\) no longer takes {keyword}=: {keyword}= is now {spec}"):
        loader("no such file", **{keyword: value})


def test_the_parameters_are_few():
    """DataLoader's keywords, the specs, and the loose keywords users pass most: 22 at most."""
    import inspect
    assert len(inspect.signature(FeedLoader.__init__).parameters) - 1 <= 22
