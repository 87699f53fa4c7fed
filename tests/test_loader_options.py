"""FeedLoader's documented surface: its defaults, DataLoader's options, the errors of options
that cannot work, its repr and its stats."""
from __future__ import annotations

import time

import pytest
import torch
from loader_helpers import small
from storefiles import make_records, write_lmdb

from feedline import FeedLoader
from feedline.core.choices import Engine, OnError, Order
from feedline.core.config import usable_cores
from feedline.core.errors import BackendUnavailable


def test_defaults_are_the_documented_ones(packed_lmdb):
    torch.manual_seed(0)
    c = FeedLoader(str(packed_lmdb), device="cpu").config   # the seed: drawn from torch's generator (test_seeds)
    assert (c.batch_size, c.order, c.on_error, c.drop_last) == (256, Order.SEQUENTIAL, OnError.RAISE, False)
    torch.manual_seed(0)
    assert c.seed == torch.empty((), dtype=torch.int64).random_().item()
    assert (c.prefetch, c.rank, c.world_size, c.even_shards, c.pin_memory) == (2, 0, 1, True, False)
    assert not c.augment.train and c.augment.size == (224, 224) and c.augment.flip  # flip: with train=True
    assert c.output.channels_last is False   # on the CPU; True on CUDA
    assert c.engine is Engine.PROCESSES and c.decoder not in ("auto", None)  # a CPU decoder, resolved
    assert FeedLoader(str(packed_lmdb), device="cpu", num_workers=0).config.engine is Engine.THREADS  # "here"


def test_num_workers_sets_the_threads(packed_lmdb):
    assert FeedLoader(str(packed_lmdb), device="cpu", num_workers=1).config.num_workers == 1
    assert FeedLoader(str(packed_lmdb), device="cpu", num_workers=0).config.num_workers == 1   # DataLoader's "here"
    with pytest.raises(ValueError, match="num_workers must be an int"):
        FeedLoader(str(packed_lmdb), device="cpu", num_workers="many")


def test_num_workers_beyond_the_usable_cores_warns_once_and_uses_the_cores(packed_lmdb):
    import warnings
    cores = usable_cores()
    with pytest.warns(UserWarning, match=rf"num_workers={cores + 998} but this process may use {cores} cores.*"
                                         rf"using {cores} workers"):
        loader = FeedLoader(str(packed_lmdb), device="cpu", num_workers=cores + 998)
    assert loader.config.num_workers == cores
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # said once: the second loader is quiet
        assert FeedLoader(str(packed_lmdb), device="cpu", num_workers=cores + 998).config.num_workers == cores


def test_prefetch_sizes_the_ring(packed_lmdb):
    """The CPU engine keeps prefetch + 2 batch buffers, allocated once."""
    assert small(packed_lmdb, prefetch=1).source.ring.slots == 3
    assert small(packed_lmdb, prefetch=4).source.ring.slots == 6


def test_order_decides_and_shuffle_must_agree_with_it(packed_lmdb):
    loader = small(packed_lmdb, shuffle=None, order="sequential", batch_size=48)
    [(_, labels)] = list(loader)
    assert labels.tolist() == loader.store.labels.tolist()   # the records' own order
    assert small(packed_lmdb, order="quasi-random").config.order is Order.QUASI_RANDOM
    with pytest.raises(ValueError, match="shuffle=False and order='random' disagree.*pass shuffle=True"):
        small(packed_lmdb, shuffle=False, order="random")
    with pytest.raises(ValueError, match="shuffle=True and order='sequential' disagree.*pass shuffle=False"):
        small(packed_lmdb, shuffle=True, order="sequential")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error given where CUDA is missing")
def test_a_cuda_device_without_cuda_is_a_clear_error(packed_lmdb):
    with pytest.raises(Exception, match="CUDA is not available"):
        small(packed_lmdb, device="cuda")


def test_the_gpu_engine_on_a_cpu_device_is_a_clear_error(packed_lmdb):
    with pytest.raises(BackendUnavailable, match="engine='gpu' decodes on a CUDA device"):
        small(packed_lmdb, engine="gpu", decoder="auto", device="cpu")


def test_one_record_loads_and_no_record_is_a_clear_error(tmp_path):
    one = write_lmdb(tmp_path / "one.lmdb", make_records(1, 1))
    assert [tuple(x.shape) for x, _ in small(one, batch_size=4)] == [(1, 3, 32, 32)]
    empty = write_lmdb(tmp_path / "empty.lmdb", make_records(0, 1))
    with pytest.raises(ValueError, match=r"empty\.lmdb: the data set is empty"):
        small(empty)


def test_repr_says_what_the_loader_reads_and_how(packed_lmdb):
    loader = small(packed_lmdb, batch_size=16)
    assert repr(loader) == (f"FeedLoader({loader.store.filename!r}, batch_size=16, engine='processes', decoder='opencv', "
                            "workers=2, device='cpu', 3 batches/epoch)")


def test_stats_count_the_epoch_and_the_consumers_wait(packed_lmdb):
    loader = small(packed_lmdb)
    assert loader.stats.bad_records == [] and loader.stats.images == 0
    started = time.perf_counter()
    batches = sum(1 for _ in loader)
    elapsed = time.perf_counter() - started
    s = loader.stats
    assert (s.images, s.batches) == (48, batches) and batches == len(loader) == 5
    assert 0 < s.wait_s <= elapsed   # the consumer's time inside next(): part of the epoch's time
