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
    """DataLoader's keywords, the specs, the loose keywords users pass most and the GPU engines'
    region_decode: 24 at most."""
    import inspect
    assert len(inspect.signature(FeedLoader.__init__).parameters) - 1 <= 24


def test_auto_workers_split_the_usable_cores_between_the_ranks_of_a_node(packed_lmdb, monkeypatch):
    """torchrun's LOCAL_WORLD_SIZE: each rank of the node takes its share of the usable cores
    (at least one); an explicit num_workers is kept (capped at the cores, not the share).
    Without it, a process has them all. The machine's 2 cores are told as 8 here, so that
    the shares differ."""
    import os

    from feedline.keywords import choose_threads
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert choose_threads("auto") == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert choose_threads("auto") == 4
    assert loader(packed_lmdb, num_workers="auto").config.num_workers == 4
    assert loader(packed_lmdb, num_workers=6).config.num_workers == 6
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert choose_threads("auto") == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "12")   # more ranks than cores: one each
    assert choose_threads("auto") == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "two")
    with pytest.raises(ValueError, match=r"LOCAL_WORLD_SIZE='two' \(torchrun's ranks on this node\) must be a "
                                         r"positive int"):
        choose_threads("auto")
