import gc
import logging
import shutil
import threading

import numpy as np
import pytest
import torch
from PIL import Image

from feedline import DecodeError, FeedLoader, open_dataset
from feedline.core.config import IMAGENET_MEAN, IMAGENET_STD, OrderSpec, OutputSpec
from feedline.planning.plan import EpochPlan


def decode_threads():
    return [t for t in threading.enumerate() if t.name.startswith("feedline-decode")]


def reference_batches(loader, epoch):
    """The batches FeedLoader should produce, built with PIL and numpy alone."""
    c = loader.config
    store = loader.store
    plan = EpochPlan(c.augment, c.seed, epoch, c.order, c.batch_size, c.drop_last, c.rank, c.world_size,
                     c.even_shards)
    h, w = c.augment.size
    for batch in plan.batches(store.labels, store.sizes):
        images = []
        for index, (top, left, bh, bw), flip in zip(batch.indices, batch.boxes, batch.flips):
            img = Image.open(store.filename + "/" + store.path(index)) if store.kind == "folder" else \
                Image.open(__import__("io").BytesIO(bytes(store.read(index))))
            img = img.convert("RGB").crop((left, top, left + bw, top + bh)).resize((w, h), Image.BILINEAR)
            if flip:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            images.append(np.asarray(img))
        x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
        yield (x - mean) / std, torch.from_numpy(batch.labels)


def collect(loader, epochs=None):
    return [(x.clone(), y.clone()) for x, y in loader]


@pytest.fixture(params=["folder", "lmdb"])
def source(request, photo_folder):
    if request.param == "folder":
        return str(photo_folder)
    return str(request.getfixturevalue("packed_lmdb"))


@pytest.mark.parametrize("decoder", ["turbojpeg", "opencv", "pil"])
def test_output_matches_a_pil_reference(source, decoder):
    loader = FeedLoader(source, batch_size=8, shuffle=True, train=True, size=64, decoder=decoder,
                        num_workers=2, device="cpu", seed=3)
    got = collect(loader)
    ref = list(reference_batches(loader, epoch=0))
    assert len(got) == len(ref) == len(loader) == 6
    for (x, y), (rx, ry) in zip(got, ref):
        assert x.shape == (8, 3, 64, 64) and x.dtype == torch.float32
        assert x.is_contiguous()  # on the CPU: plain NCHW unless channels_last=True is asked
        assert y.dtype == torch.int64 and torch.equal(y, ry)
        assert (x - rx).abs().mean() < 0.08, "normalized pixels differ from the PIL reference"


def test_defaults_give_the_same_batches_every_pass_in_a_layout_view_takes(packed_lmdb):
    """Left out, train is False (no random crops: two passes over a validation set agree)
    and CPU output is plain NCHW (``x.view(n, -1)`` works); channels_last=True still gives
    channels_last memory."""
    with FeedLoader(str(packed_lmdb), batch_size=8, size=32, device="cpu", decoder="opencv") as loader:
        assert loader.config.augment.train is False and loader.config.output.channels_last is False
        first, second = collect(loader), collect(loader)
    for (x, y), (x2, y2) in zip(first, second, strict=True):
        assert torch.equal(x, x2) and torch.equal(y, y2)
        assert x.view(len(x), -1).shape == (len(x), 3 * 32 * 32)
    with FeedLoader(str(packed_lmdb), batch_size=8, size=32, device="cpu", decoder="opencv",
                    output=OutputSpec(channels_last=True)) as loader:
        x, _ = next(iter(loader))
        assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


@pytest.mark.turbojpeg
def test_eval_mode_uint8_and_dtypes(photo_folder):
    loader = FeedLoader(str(photo_folder), batch_size=5, train=False, size=(48, 40), mean=None,
                        decoder="turbojpeg", num_workers=1, device="cpu")
    x, y = next(iter(loader))
    assert x.shape == (5, 3, 48, 40) and x.dtype == torch.uint8
    assert x.is_contiguous()
    ref, _ = next(reference_batches(loader, 0))
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    assert (x.float() / 255 - (ref * std + mean)).abs().mean() < 0.02
    bf = FeedLoader(str(photo_folder), batch_size=5, train=False, size=32,
                    output=OutputSpec(dtype=torch.bfloat16, channels_last=False), num_workers=1, device="cpu")
    x, _ = next(iter(bf))
    assert x.dtype == torch.bfloat16 and x.is_contiguous()
    loader.close()
    bf.close()


@pytest.mark.turbojpeg
def test_same_batches_for_any_thread_count_and_run(packed_lmdb):
    runs = []
    for threads in (1, 2, 4, 2):
        loader = FeedLoader(str(packed_lmdb), batch_size=7, shuffle=True, size=32, num_workers=threads,
                            device="cpu", seed=11, decoder="turbojpeg")
        runs.append(collect(loader))
    for run in runs[1:]:
        assert len(run) == len(runs[0]) == 7  # 48 / 7, last batch partial
        assert run[-1][0].shape[0] == 48 - 6 * 7
        for (x, y), (x0, y0) in zip(run, runs[0]):
            assert torch.equal(x, x0) and torch.equal(y, y0)


def test_epochs_differ_and_set_epoch_repeats(packed_lmdb):
    loader = FeedLoader(str(packed_lmdb), batch_size=16, shuffle=True, size=32, num_workers=2, device="cpu",
                        drop_last=True)
    e0 = collect(loader)
    e1 = collect(loader)  # iterating again moves to the next epoch
    assert not torch.equal(e0[0][1], e1[0][1])
    loader.set_epoch(0)
    again = collect(loader)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(e0, again))


def test_resume_mid_epoch_equals_uninterrupted(packed_lmdb):
    kwargs = dict(batch_size=6, shuffle=True, size=32, num_workers=2, device="cpu", seed=5)
    full = FeedLoader(str(packed_lmdb), **kwargs)
    full.set_epoch(1)
    expected = collect(full) + collect(full)  # epoch 1, then epoch 2
    first = FeedLoader(str(packed_lmdb), **kwargs)
    first.set_epoch(1)
    it = iter(first)
    seen = [next(it) for _ in range(3)]
    state = first.state_dict()
    del it
    first.close()
    resumed = FeedLoader(str(packed_lmdb), **kwargs)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # the usual training loop calls this; it keeps the resume position
    rest = collect(resumed) + collect(resumed)
    got = [(x.clone(), y.clone()) for x, y in seen] + rest
    assert len(got) == len(expected)
    for (x, y), (ex, ey) in zip(got, expected):
        assert torch.equal(x, ex) and torch.equal(y, ey)


def test_resume_rejects_a_different_configuration(packed_lmdb):
    a = FeedLoader(str(packed_lmdb), batch_size=6, size=32, device="cpu")
    b = FeedLoader(str(packed_lmdb), batch_size=8, size=32, device="cpu")
    with pytest.raises(ValueError, match="batch_size"):
        b.load_state_dict(a.state_dict())


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
def test_ranks_get_disjoint_equal_shares(packed_lmdb, world):
    seen, lengths = [], set()
    for rank in range(world):
        loader = FeedLoader(str(packed_lmdb), batch_size=4, shuffle=True, size=16, num_workers=1,
                            device="cpu", order=OrderSpec(rank=rank, world_size=world), mean=None, seed=0)
        batches = list(iter(loader))
        lengths.add(len(batches))
        assert len(batches) == len(loader)
        seen.extend(torch.cat([y for _, y in batches]).tolist())
    assert len(lengths) == 1
    assert len(seen) == -(-48 // world) * world


@pytest.fixture
def folder_with_a_bad_jpeg(photo_folder, tmp_path):
    root = tmp_path / "images"
    shutil.copytree(photo_folder, root)
    bad = root / "class_001" / "img_0000005.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10)
    return root


@pytest.mark.turbojpeg
def test_decode_error_reaches_the_consumer_with_index_and_path(folder_with_a_bad_jpeg):
    loader = FeedLoader(str(folder_with_a_bad_jpeg), batch_size=4, size=32, num_workers=2, device="cpu",
                        decoder="turbojpeg")
    bad_index = [loader.store.path(i) for i in range(len(loader.store))].index("class_001/img_0000005.jpg")
    with pytest.raises(DecodeError) as info:
        collect(loader)
    assert info.value.index == bad_index
    assert info.value.path == "class_001/img_0000005.jpg"
    assert "class_001/img_0000005.jpg" in str(info.value)
    gc.collect()
    assert decode_threads() == []


def test_substitution_keeps_the_batch_shape_and_is_in_the_ledger(folder_with_a_bad_jpeg, caplog):
    loader = FeedLoader(str(folder_with_a_bad_jpeg), batch_size=4, size=32, num_workers=2, device="cpu",
                        on_error="substitute", decoder="opencv", seed=0)
    bad_index = [loader.store.path(i) for i in range(len(loader.store))].index("class_001/img_0000005.jpg")
    with caplog.at_level(logging.WARNING, logger="feedline.loading.loader"):
        batches = collect(loader)
    assert all(x.shape == (4, 3, 32, 32) for x, _ in batches)
    assert loader.stats.substituted == 1
    [bad] = loader.stats.bad_records
    assert (bad.epoch, bad.index, bad.path, bad.reason) == (0, bad_index, "class_001/img_0000005.jpg",
                                                             "cannot decode")
    assert bad.substitute is not None and bad.substitute != bad_index
    assert batches[bad.batch][1][bad.position] == loader.store.label(bad.substitute)
    lines = [r for r in caplog.records if "bad record" in r.getMessage()]
    assert len(lines) == 1 and "class_001/img_0000005.jpg" in lines[0].getMessage()  # one line per epoch
    again = FeedLoader(str(folder_with_a_bad_jpeg), batch_size=4, size=32, num_workers=1, device="cpu",
                       on_error="substitute", decoder="opencv", seed=0)
    for (x, y), (x2, y2) in zip(batches, collect(again)):
        assert torch.equal(x, x2) and torch.equal(y, y2)  # the substitute is deterministic


def test_no_threads_leak_after_break_or_close(packed_lmdb):
    """Worker threads, as worker processes (test_process_workers), live across iterations (a
    break included) and end with close(), or with a loader left to the collector."""
    loader = FeedLoader(str(packed_lmdb), batch_size=4, size=32, num_workers=2, device="cpu", engine="threads")
    for _ in loader:
        assert len(decode_threads()) == 2
        break
    assert len(decode_threads()) == 2
    it = iter(loader)
    next(it)
    loader.close()
    assert decode_threads() == []
    with FeedLoader(str(packed_lmdb), batch_size=4, size=32, num_workers=2, device="cpu", engine="threads") as ctx:
        next(iter(ctx))
    gc.collect()
    assert decode_threads() == []
    left = FeedLoader(str(packed_lmdb), batch_size=4, size=32, num_workers=2, device="cpu", engine="threads")
    next(iter(left))
    del left
    gc.collect()
    assert decode_threads() == []


def test_len_stats_and_dataloader_arguments(packed_lmdb):
    loader = FeedLoader(str(packed_lmdb), batch_size=10, size=32, device="cpu", num_workers=2,
                        pin_memory=False, persistent_workers=True, drop_last=True)
    assert loader.config.num_workers == 2
    assert len(loader) == 4
    n = sum(len(y) for _, y in loader)
    assert n == 40
    stats = loader.stats.as_dict()
    assert stats["images"] == 40 and stats["batches"] == 4 and stats["images_per_s"] > 0
    assert loader.stats.decode_s > 0 and loader.stats.read_s >= 0
    store = open_dataset(str(packed_lmdb))
    assert len(FeedLoader(store, batch_size=10, size=32, device="cpu")) == 5


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine pinning is available")
def test_pin_memory_without_an_accelerator_warns_and_loads_like_dataloader(packed_lmdb):
    with pytest.warns(UserWarning, match="pin_memory=True but no CUDA device"):
        loader = FeedLoader(str(packed_lmdb), batch_size=10, size=32, device="cpu", pin_memory=True)
    assert loader.config.pin_memory is False
    images, labels = next(iter(loader))
    assert images.shape == (10, 3, 32, 32) and not images.is_pinned()
    loader.close()


def test_bad_arguments_are_refused(packed_lmdb):
    with pytest.raises(ValueError):
        FeedLoader(str(packed_lmdb), batch_size=0, device="cpu")
    with pytest.raises(ValueError):
        FeedLoader(str(packed_lmdb), on_error="ignore", device="cpu")
    with pytest.raises(ValueError):
        FeedLoader(str(packed_lmdb), decoder="nope", device="cpu")


@pytest.mark.dali
@pytest.mark.turbojpeg
def test_dali_cpu_pipeline_matches_the_turbojpeg_path(source):
    kwargs = dict(batch_size=8, shuffle=True, train=True, size=48, num_workers=2, device="cpu", seed=2,
                  output=OutputSpec(channels_last=True))
    with FeedLoader(source, engine="dali", **kwargs) as dali, \
            FeedLoader(source, decoder="turbojpeg", **kwargs) as turbo:
        for epoch in (0, 1):
            dali.set_epoch(epoch)
            turbo.set_epoch(epoch)
            pairs = list(zip(collect(dali), collect(turbo)))
            assert len(pairs) == len(turbo) == 6
            for (x, y), (tx, ty) in pairs:
                assert x.shape == tx.shape and x.dtype == tx.dtype == torch.float32
                assert x.is_contiguous(memory_format=torch.channels_last)
                assert torch.equal(y, ty)
                assert (x - tx).abs().mean() < 0.08


@pytest.mark.turbojpeg
def test_a_decoder_instance_is_used_as_given(packed_lmdb):
    from feedline.decoders import get_decoder
    fast = get_decoder("turbojpeg", fast_dct=True, fast_upsample=True)
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, device="cpu", decoder=fast)
    assert loader.config.decoder == "turbojpeg"
    x, _ = next(iter(loader))
    assert loader.source.decoder is fast and x.shape == (8, 3, 32, 32)
    loader.close()


def test_state_of_an_unknown_version_is_refused(packed_lmdb):
    loader = FeedLoader(str(packed_lmdb), batch_size=6, size=32, device="cpu")
    state = {**loader.state_dict(), "version": 99}
    with pytest.raises(ValueError, match=r"version 99.*reads versions 1, 2"):
        loader.load_state_dict(state)
    old = {k: v for k, v in loader.state_dict().items() if k not in ("order", "drop_last", "even_shards")}
    loader.load_state_dict({**old, "version": 1, "shuffle": False, "epoch": 3, "batch": 2})
    assert loader.state_dict()["epoch"] == 3 and loader.state_dict()["batch"] == 2


@pytest.mark.parametrize("world", [2, 3, 5])
def test_uneven_shards_visit_each_record_once(packed_lmdb, world):
    """even_shards=False (evaluation): the ranks' record sets are disjoint, cover the data set,
    and their sizes differ by at most one."""
    from feedline.planning.plan import EpochPlan
    shares = []
    for rank in range(world):
        loader = FeedLoader(str(packed_lmdb), batch_size=4, size=16, device="cpu", train=False,
                            order=OrderSpec(rank=rank, world_size=world, even_shards=False))
        c = loader.config
        plan = EpochPlan(c.augment, c.seed, 0, c.order, c.batch_size, c.drop_last, rank, world, False)
        indices = np.concatenate([p.indices for p in plan.batches(loader.store.labels, loader.store.sizes)])
        assert len(indices) == loader.samples_per_rank and len(loader) == -(-len(indices) // 4)
        assert sum(len(y) for _, y in loader) == len(indices)
        shares.append(set(indices.tolist()))
    assert sum(len(s) for s in shares) == 48 and set().union(*shares) == set(range(48))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


# -- DataLoader habits (issue 23) --------------------------------------------------------------

class JpegFolderDataset(torch.utils.data.Dataset):
    """A map-style Dataset of an image folder, as one is written for DataLoader."""

    def __init__(self, root):
        self.paths = sorted(root.rglob("*.jpg"))
        classes = sorted({p.parent.name for p in self.paths})
        self.labels = [classes.index(p.parent.name) for p in self.paths]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        return torch.from_numpy(np.array(Image.open(self.paths[i]).convert("RGB"))), self.labels[i]


def test_a_torch_dataset_is_refused_with_what_feedloader_takes(photo_folder):
    dataset = JpegFolderDataset(photo_folder)
    assert len(dataset) == 48 and dataset[0][0].ndim == 3
    with pytest.raises(TypeError, match=r"FeedLoader reads packed images: .* got a JpegFolderDataset \(a "
                                        r"map-style dataset, such as a torch Dataset, is not read directly\)\. "
                                        r"Pack your images first: `feedline pack IMAGE_FOLDER OUT\.lmdb`"):
        FeedLoader(dataset, batch_size=4, device="cpu")
    with pytest.raises(TypeError, match="got a int"):
        FeedLoader(3, device="cpu")


def test_a_stale_iterator_raises_instead_of_ending_silently(packed_lmdb):
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, num_workers=2, device="cpu", decoder="opencv")
    first = iter(loader)
    next(first)
    second = iter(loader)
    with pytest.raises(RuntimeError, match=r"ended: a second iter\(loader\) started a new iteration.*newest"):
        next(first)
    assert next(second)[0].shape == (8, 3, 32, 32)
    loader.load_state_dict(loader.state_dict())
    with pytest.raises(RuntimeError, match=r"ended: load_state_dict\(\) moved the loader"):
        next(second)
    third = iter(loader)
    next(third)
    loader.close()
    with pytest.raises(RuntimeError, match="ended: the loader was closed"):
        next(third)
    assert decode_threads() == []


def test_a_batch_too_large_for_memory_says_what_it_needs(packed_lmdb):
    with pytest.raises(MemoryError, match=r"batch_size=1000000 at 224x224: the batch buffers need about "
                                          r"[\d,.]+ GiB of memory \(4 batches of 560\.76 GiB for "
                                          r"prefetch=2\), but [\d,.]+ GiB is available"):
        FeedLoader(str(packed_lmdb), batch_size=10**6, device="cpu")
