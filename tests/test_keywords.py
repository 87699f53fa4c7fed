"""feedline.loading.keywords: FeedLoader's keywords as specs, and the keywords that moved into a spec
refused by name."""
from __future__ import annotations

import warnings

import pytest
import torch

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
    ("num_threads", 2, r"num_workers=\.\.\. \(the worker processes"),
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

    from feedline.loading.keywords import choose_workers
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert choose_workers("auto") == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert choose_workers("auto") == 4
    assert loader(packed_lmdb, num_workers="auto").config.num_workers == 4
    assert loader(packed_lmdb, num_workers=6).config.num_workers == 6
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert choose_workers("auto") == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "12")   # more ranks than cores: one each
    assert choose_workers("auto") == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "two")
    with pytest.raises(ValueError, match=r"LOCAL_WORLD_SIZE='two' \(torchrun's ranks on this node\) must be a "
                                         r"positive int"):
        choose_workers("auto")


@pytest.mark.parametrize("keyword, answer", [
    ("sampler", r"FeedLoader plans the order itself: shuffle=True, or order='random'.*each rank reads its own share"),
    ("batch_sampler", r"FeedLoader makes the batches itself: batch_size= and drop_last="),
    ("collate_fn", r"batches come stacked .*batch_transforms=\[fn\(images, targets\)"),
    ("worker_init_fn", r"workers need no set-up: a per-sample transform fn\(image, rng\)"),
    ("prefetch_factor", r"prefetch= \(batches prepared ahead"),
    ("generator", r"seed= \(an int.*drawn from torch's global generator"),
    ("multiprocessing_context", r"engine='processes' starts its own workers"),
])
def test_dataloaders_own_keywords_are_answered_with_feedlines_way(keyword, answer):
    """One line each, before the source is even opened."""
    with pytest.raises(TypeError, match=rf"^FeedLoader\(\) takes no {keyword}= \(DataLoader's\): {answer}"):
        loader("no such file", **{keyword: None})


def test_a_torch_dataset_hears_pack_first_before_its_dataloader_keywords():
    dataset = torch.utils.data.TensorDataset(torch.zeros(4, 3))
    with pytest.raises(TypeError, match=r"got a TensorDataset \(a map-style dataset.*Pack your images first"):
        FeedLoader(dataset, sampler=None, collate_fn=None)


def test_shuffled_evaluation_crops_are_warned_about_once(packed_lmdb, monkeypatch):
    """shuffle=True (or a shuffling order) without train= or augment=: center crops in a random
    order, said once per process; train= or augment= given, or no shuffle, says nothing."""
    from feedline import AugmentSpec
    from feedline.loading import keywords
    monkeypatch.setattr(keywords, "_warned_shuffled_evaluation", False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for kw in ({"shuffle": False}, {"shuffle": True, "train": True}, {"shuffle": True, "train": False},
                   {"order": "random", "augment": AugmentSpec(size=32, train=True)}):
            loader(packed_lmdb, **kw).close()
        assert [str(w.message) for w in seen] == []
        loader(packed_lmdb, shuffle=True).close()
        loader(packed_lmdb, order="quasi-random").close()
    said = [str(w.message) for w in seen if "shuffled" in str(w.message)]
    assert said == ["shuffled evaluation crops: pass train=True for RandomResizedCrop and flip (or train=False "
                    "to keep center crops and silence this)"]
    assert seen[0].filename == __file__   # pointed at the caller's line


class TorchvisionStyle:
    """A transform as torchvision writes them: one argument."""

    def __call__(self, img):
        return img


@pytest.mark.parametrize("transforms, where", [
    ([lambda img: img], r"transforms\[0\] \(.*<lambda>\)"),
    ([lambda image, rng: image, TorchvisionStyle()], r"transforms\[1\] \(TorchvisionStyle\)"),
])
def test_a_one_argument_per_sample_callable_is_refused_when_the_loader_is_built(packed_lmdb, transforms, where):
    with pytest.raises(TypeError, match=rf"{where} cannot take two arguments \(a torchvision-style transform "
                                        r"takes one\); feedline calls each of transforms as fn\(image, rng\)"):
        loader(packed_lmdb, transforms=transforms)


def test_two_argument_callables_and_the_built_ins_are_accepted(packed_lmdb):
    from feedline import TransformSpec
    from feedline.transforms import ColorJitter, Mixup

    def keep(image, rng, strength=1):
        return image
    spec = TransformSpec([keep, ColorJitter(0.1, 0.1, 0.1)],
                         batch_transforms=[Mixup(mixup_alpha=0.2), lambda images, targets: (images, targets)])
    with loader(packed_lmdb, transforms=spec, size=32, train=True) as ok:
        images, _ = next(iter(ok))
        assert images.shape == (8, 3, 32, 32)
    with pytest.raises(TypeError, match=r"batch_transforms\[0\] .* as fn\(images, targets\) -> \(images, targets\)"):
        loader(packed_lmdb, transforms=TransformSpec([], batch_transforms=[lambda images: images]))
