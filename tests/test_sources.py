"""sources/__init__.py: make_source builds the transforms, the targets, the bad-record rule and
the Finisher once and hands the same objects to the engine, its workers and its Finisher."""
from __future__ import annotations

import pytest

from feedline import FeedLoader
from feedline.core.config import TransformSpec
from feedline.sources.finisher import Filled, HostFinisher
from feedline.transforms import ColorJitter, Mixup


def test_the_engine_and_its_finisher_share_what_was_built_once(packed_lmdb):
    with FeedLoader(str(packed_lmdb), batch_size=4, size=16, device="cpu", decoder="opencv", train=True,
                    transforms=TransformSpec([ColorJitter(0.2)], [Mixup(1.0, 1.0)])) as loader:
        source = loader.source
        finisher = source.finisher
        assert isinstance(finisher, HostFinisher) and finisher.filled == Filled(normalized=True, samples_applied=True)
        assert finisher.targets is source.targets
        assert source.workers.spec.transforms is finisher.transforming.host
        assert source.bad_records.on_error.value == "raise" and not source.workers.spec.substitute
        x, y = next(iter(loader))
        assert x.shape == (4, 3, 16, 16) and y.shape == (4, 4)   # mixed: soft targets


def test_the_cpu_engine_needs_the_decoder_chosen_for_it(packed_lmdb):
    from feedline import open_dataset
    from feedline.core.config import LoaderConfig, OutputSpec
    from feedline.sources import make_source
    with pytest.raises(ValueError, match="the CPU engine needs its Decoder"):
        make_source(open_dataset(str(packed_lmdb)), LoaderConfig(output=OutputSpec(device="cpu")))
