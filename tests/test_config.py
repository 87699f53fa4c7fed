"""feedline.core.config: FeedLoader's option groups as spec objects or loose keywords, the dtype
resolved once, the one order/shuffle rule, and a rank's place checked."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from feedline import FeedLoader
from feedline.planning.augment import AugmentSpec
from feedline.core.choices import Engine, Order
from feedline.core.config import LoaderConfig, OrderSpec, OutputSpec, distributed_position
from feedline.loading.keywords import choose_order


def loader(path, **kw) -> FeedLoader:
    return FeedLoader(str(path), **{"batch_size": 8, "device": "cpu", "num_workers": 1, "decoder": "opencv", "seed": 0,
                                    **kw})


# -- spec objects ------------------------------------------------------------------------------

def test_the_groups_as_objects_equal_the_same_groups_as_keywords(packed_lmdb):
    spec = AugmentSpec(size=(40, 48), train=False)
    out = OutputSpec(mean=None)   # channels_last: the device's default, as the keywords get
    objects = loader(packed_lmdb, augment=spec, output=out)
    words = loader(packed_lmdb, size=(40, 48), train=False, mean=None)
    assert objects.config == words.config and objects.config.augment == spec
    (x, _), (wx, _) = next(iter(objects)), next(iter(words))
    assert x.shape == (8, 3, 40, 48) and x.dtype == torch.uint8 and torch.equal(x, wx)
    assert x.is_contiguous()   # the CPU's default layout: NCHW


def test_a_group_given_both_ways_is_refused(packed_lmdb):
    with pytest.raises(ValueError, match=r"augment=AugmentSpec\(\.\.\.\) and the keywords size, train are both "
                                         r"given: pass the augment options one way"):
        loader(packed_lmdb, augment=AugmentSpec(), size=32, train=True)
    with pytest.raises(ValueError, match=r"output=OutputSpec\(\.\.\.\) and the keywords dtype are both given"):
        loader(packed_lmdb, output=OutputSpec(), dtype=torch.float16)
    with pytest.raises(TypeError, match="augment= takes a AugmentSpec, got dict"):
        loader(packed_lmdb, augment={"size": 32})
    with pytest.raises(ValueError, match=r"device='cpu' and output=OutputSpec\(device='meta'\) disagree"):
        loader(packed_lmdb, output=OutputSpec(device="meta"))


def test_the_output_device_may_come_from_the_spec(packed_lmdb):
    assert loader(packed_lmdb, device=None, output=OutputSpec(device="cpu")).config.output.device == "cpu"


def test_dtype_is_resolved_once_when_the_spec_is_built():
    assert OutputSpec().dtype is torch.float32
    assert OutputSpec(mean=None).dtype is torch.uint8 and OutputSpec(mean=None).std is None
    assert OutputSpec(dtype=torch.bfloat16).dtype is torch.bfloat16
    assert LoaderConfig().output.dtype is torch.float32
    with pytest.raises(ValueError, match="mean=None gives uint8 images"):
        OutputSpec(mean=None, dtype=torch.float32)
    with pytest.raises(TypeError, match="floating point torch.dtype"):
        OutputSpec(dtype=torch.int32)
    with pytest.raises(ValueError, match="mean and std need 3 values each"):
        OutputSpec(mean=(0.5, 0.5))


def test_the_loader_config_is_resolved():
    c = LoaderConfig()
    assert c.engine is Engine.THREADS and c.decoder == "nvimgcodec" and c.output.device in ("cpu", "cuda:0")
    assert "shuffle" not in {f.name for f in dataclasses.fields(LoaderConfig)} and not hasattr(c, "shuffle")
    with pytest.raises(ValueError, match="not 'auto'"):
        LoaderConfig(engine="auto")
    with pytest.raises(ValueError, match="the CPU engine names its decoder"):
        LoaderConfig(engine="dali", decoder="opencv")


# -- order and shuffle: order decides, shuffle agrees ------------------------------------------

@pytest.mark.parametrize("shuffle, order, expected", [
    (None, None, Order.SEQUENTIAL), (False, None, Order.SEQUENTIAL), (True, None, Order.RANDOM),
    (None, "random", Order.RANDOM), (True, "quasi-random", Order.QUASI_RANDOM),
    (None, "sequential", Order.SEQUENTIAL), (False, "sequential", Order.SEQUENTIAL)])
def test_order_decides_and_shuffle_may_agree(shuffle, order, expected):
    assert choose_order(shuffle, order) is expected


@pytest.mark.parametrize("shuffle, order", [(True, "sequential"), (False, "random"), (False, "quasi-random")])
def test_shuffle_that_disagrees_with_order_is_refused(shuffle, order):
    with pytest.raises(ValueError, match=rf"shuffle={shuffle} and order='{order}' disagree.*leave shuffle unset "
                                         rf"or pass shuffle={not shuffle}"):
        choose_order(shuffle, order)


# -- rank and world_size -----------------------------------------------------------------------

@pytest.mark.parametrize("rank, world_size, message", [
    (0, 0, r"world_size must be at least 1 \(the number of ranks\), got 0"),
    (0, -2, "world_size must be at least 1"),
    (2, 2, r"rank 2 is not in 0\.\.1 \(world_size=2\)"),
    (-1, 4, r"rank -1 is not in 0\.\.3"),
    (0, 1.5, "world_size must be an int, got 1.5"),
    ("0", 2, "rank must be an int, got '0'"),
    (True, 2, "rank must be an int, got True"),
    (0, None, "give both rank and world_size, or neither")])
def test_a_bad_rank_or_world_size_says_what_is_wrong(rank, world_size, message):
    with pytest.raises(ValueError, match=message):
        distributed_position(rank, world_size)


def test_world_size_zero_in_the_loader(packed_lmdb):
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        loader(packed_lmdb, order=OrderSpec(rank=0, world_size=0))
    assert distributed_position(torch.tensor(1).item(), 3) == (1, 3)
