"""FeedLoader's batches against an independent oracle, on LMDB and HDF5 stores.

The oracle decodes each record's source JPEG with PIL, crops it where torchvision's
RandomResizedCrop (training) or Resize + CenterCrop (evaluation) puts the crop, computed by
tests/oracles.py from (seed, epoch, index) alone (never from the loader's own plan), then
resizes and flips it by hand. Every record has its own class folder, so a sample's label
names the record it came from, and what a rank visits can be checked as a set of indices.
"""
from __future__ import annotations

import os
import shutil
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image

import oracles
from feedline import AugmentSpec, FeedLoader, OrderSpec, OutputSpec, open_dataset
from feedline.sample import make_photo_folder

N = 20          # records, one per class: label == index
SIZE = 48       # output side
SEED = 5
SIZES = [(160, 120), (120, 160), (200, 150), (96, 96), (240, 180)]

# Mean absolute difference, in uint8 levels, between a delivered sample and the oracle's.
# The loader's decoder decodes only the crop, at a reduced DCT scale when it can, and
# resizes with its own filter; PIL decodes everything and resizes bilinearly: a few levels
# apart on these photos. The same sample flipped, or another crop, is 10 to 70 levels away.
CLOSE_ON_AVERAGE = 6.0
CLOSE_AT_WORST = 16.0


@pytest.fixture(scope="module")
def unique_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("oracle") / "images"
    make_photo_folder(str(root), n=N, classes=N, seed=2, sizes=SIZES)
    return root


@pytest.fixture(scope="module", params=["lmdb", "h5"])
def store_path(request, unique_folder, tmp_path_factory):
    from converters import pack
    out = tmp_path_factory.mktemp("oracle-packed") / f"unique.{request.param}"
    pack(str(unique_folder), str(out))
    store = open_dataset(str(out))
    # The layout the oracle relies on: record i is class_i's only image, labelled i.
    assert len(store) == N and store.labels.tolist() == list(range(N))
    assert [store.path(i) for i in range(N)] == [f"class_{i:03d}/img_{i:07d}.jpg" for i in range(N)]
    return str(out)


class Oracle:
    """What sample ``index`` must look like, from the source folder and oracles.py alone."""

    def __init__(self, folder):
        self.images = {}
        for i in range(N):
            with Image.open(os.path.join(folder, f"class_{i:03d}", f"img_{i:07d}.jpg")) as im:
                self.images[i] = im.convert("RGB")

    def train_params(self, index: int, epoch: int):
        width, height = self.images[index].size
        return oracles.train_params(SEED, epoch, index, height, width)

    def train(self, index: int, epoch: int, flip: bool | None = None) -> np.ndarray:
        (top, left, h, w), drawn = self.train_params(index, epoch)
        out = self.images[index].crop((left, top, left + w, top + h)).resize((SIZE, SIZE), Image.BILINEAR)
        if drawn if flip is None else flip:
            out = out.transpose(Image.FLIP_LEFT_RIGHT)
        return np.asarray(out, dtype=np.float32)

    def flipped(self, index: int, epoch: int) -> bool:
        return self.train_params(index, epoch)[1]

    def evaluate(self, index: int, flip: bool = False, crop_fraction: float = 0.875) -> np.ndarray:
        """torchvision: Resize(int(SIZE / crop_fraction)) (bilinear), then CenterCrop(SIZE)."""
        im = self.images[index]
        (rh, rw), (top, left, h, w) = oracles.eval_geometry(im.height, im.width, (SIZE, SIZE), crop_fraction)
        out = im.resize((rw, rh), Image.BILINEAR).crop((left, top, left + w, top + h))
        if flip:
            out = out.transpose(Image.FLIP_LEFT_RIGHT)
        return np.asarray(out, dtype=np.float32)


@pytest.fixture(scope="module")
def oracle(unique_folder):
    return Oracle(unique_folder)


def loader_for(path, **kw) -> FeedLoader:
    options = dict(batch_size=6, shuffle=True, train=True, size=SIZE, mean=None, num_workers=2, device="cpu", seed=SEED)
    options.update(kw)
    if "augment" in kw:   # the spec carries the size and train, and the output spec the mean
        del options["size"], options["train"]
    if "output" in kw:
        del options["mean"]
    return FeedLoader(path, **options)


def samples(loader, epoch: int):
    """(index, uint8 H x W x 3 image as float32) of every sample of ``epoch``, in order."""
    loader.set_epoch(epoch)
    out = []
    for x, y in loader:
        assert x.dtype == torch.uint8 and x.shape[1:] == (3, SIZE, SIZE) and len(x) == len(y)
        out += [(int(i), img.permute(1, 2, 0).numpy().astype(np.float32)) for i, img in zip(y, x)]
    return out


def difference(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).mean())


def assert_close(errors: list[float], what: str):
    assert errors, f"no samples to compare ({what})"
    assert max(errors) < CLOSE_AT_WORST, f"{what}: a sample is {max(errors):.1f} levels from the oracle"
    assert np.mean(errors) < CLOSE_ON_AVERAGE, f"{what}: {np.mean(errors):.1f} levels from the oracle on average"


# -- training and evaluation pixels -------------------------------------------------------------

def test_training_samples_are_torchvisions_crops_flipped_by_the_draw(store_path, oracle):
    loader = loader_for(store_path)
    orders = []
    for epoch in (0, 1):
        got = samples(loader, epoch)
        indices = [i for i, _ in got]
        assert sorted(indices) == list(range(N)), "one epoch visits every record once"
        orders.append(indices)
        errors, flips = [], 0
        for index, image in got:
            error = difference(image, oracle.train(index, epoch))
            other_flip = difference(image, oracle.train(index, epoch, flip=not oracle.flipped(index, epoch)))
            assert error < 0.6 * other_flip, f"record {index}: the flip is not the drawn one"
            errors.append(error)
            flips += oracle.flipped(index, epoch)
        assert_close(errors, f"training epoch {epoch}")
        assert 0 < flips < N
    assert orders[0] != orders[1] and orders[0] != list(range(N)), "shuffled, differently each epoch"


def test_scale_ratio_and_flip_reach_the_crops(store_path, oracle):
    """Non-default scale and ratio ranges give torchvision's crops for those ranges; flip=False
    never flips."""
    scale, ratio = (0.3, 0.45), (0.8, 1.25)
    got = samples(loader_for(store_path, augment=AugmentSpec(size=SIZE, train=True, scale=scale, ratio=ratio, flip=False)), 4)
    errors = []
    for index, image in got:
        im = oracle.images[index]
        (top, left, h, w), _ = oracles.train_params(SEED, 4, index, im.height, im.width, scale, ratio)
        want = np.asarray(im.crop((left, top, left + w, top + h)).resize((SIZE, SIZE), Image.BILINEAR),
                          dtype=np.float32)
        error = difference(image, want)
        assert error < 0.6 * difference(image, want[:, ::-1]), f"record {index} flipped"
        errors.append(error)
    assert_close(errors, "scale, ratio, flip=False")


@pytest.mark.parametrize("crop_fraction", [0.875, 0.6])
def test_evaluation_samples_are_resize_and_center_crop_without_flips(store_path, oracle, crop_fraction):
    loader = loader_for(store_path, shuffle=False, augment=AugmentSpec(size=SIZE, train=False, crop_fraction=crop_fraction))
    first = None
    for epoch in (0, 3):
        got = samples(loader, epoch)
        assert [i for i, _ in got] == list(range(N)), "evaluation visits the records in order"
        errors = []
        for index, image in got:
            want = oracle.evaluate(index, crop_fraction=crop_fraction)
            error = difference(image, want)
            assert error < 0.6 * difference(image, want[:, ::-1]), f"record {index} flipped"
            # and not the random crop a training sample gets
            assert error < 0.6 * difference(image, oracle.train(index, epoch)) or \
                difference(want, oracle.train(index, epoch)) < 2 * CLOSE_ON_AVERAGE
            errors.append(error)
        assert_close(errors, f"evaluation epoch {epoch}, crop_fraction {crop_fraction}")
        if crop_fraction != 0.875:   # the default's crop is another, visibly
            assert np.mean([difference(image, oracle.evaluate(i)) for i, image in got]) > 2 * np.mean(errors)
        images = np.stack([image for _, image in got])
        if first is None:
            first = images
        else:
            assert np.array_equal(first, images), "evaluation gives the same batches every epoch"


# -- ranks ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("world", [2, 3])
def test_ranks_share_an_epoch_as_distributed_sampler(store_path, oracle, world):
    """Rank r gets places r, r + world, ... of the one-rank order wrapped around to a
    multiple of world: equal counts, together every record, the only repeats the padding."""
    whole = [i for i, _ in samples(loader_for(store_path), 2)]
    per_rank = -(-N // world)
    padded = (whole * 2)[:per_rank * world]
    shares = []
    for rank in range(world):
        got = samples(loader_for(store_path, order=OrderSpec(rank=rank, world_size=world)), 2)
        share = [i for i, _ in got]
        assert share == padded[rank::world]
        assert_close([difference(image, oracle.train(i, 2)) for i, image in got], f"rank {rank}")
        shares.append(share)
    assert {len(s) for s in shares} == {per_rank}
    counts = Counter(i for s in shares for i in s)
    assert set(counts) == set(range(N)), "together the ranks visit every record"
    repeats = Counter({i: c - 1 for i, c in counts.items() if c > 1})
    assert repeats == Counter(whole[:per_rank * world - N]), "only the wrap-around padding repeats"


def test_uneven_shards_split_an_epoch_exactly(store_path):
    world = 3
    whole = [i for i, _ in samples(loader_for(store_path, shuffle=False, train=False), 0)]
    shares = [[i for i, _ in samples(loader_for(store_path, shuffle=False, train=False,
                                                 order=OrderSpec(rank=r, world_size=world, even_shards=False)), 0)]
              for r in range(world)]
    assert shares == [whole[r::world] for r in range(world)]
    assert sorted(i for s in shares for i in s) == list(range(N)), "disjoint and covering"


# -- a bad record ---------------------------------------------------------------------------------

def damage_record(src: str, dst: str, *indices: int) -> None:
    """Copy the store and flip 64 bytes in the middle of each record's JPEG data
    (everywhere they occur: an LMDB file may keep a stale copy in a free page)."""
    store = open_dataset(src)
    data = open(src, "rb").read()
    for index in indices:
        record = bytes(store.read(index))
        middle = record[len(record) // 2:len(record) // 2 + 64]
        assert middle in data, "the record's bytes are stored in one piece"
        data = data.replace(middle, bytes(b ^ 0x5A for b in middle))
    with open(dst, "wb") as fh:
        fh.write(data)


def first_good_substitute(index: int, epoch: int, damaged: set[int]) -> int | None:
    """The documented rule: attempt 0, 1, ... until a substitute that is not bad itself."""
    for attempt in range(16):
        pick = oracles.substitute_index(SEED, epoch, index, attempt, N)
        if pick not in damaged:
            return pick
    return None


# The thread source and DALI (CPU operators here) share the substitute rule and the ledger.
ENGINES = ["auto", pytest.param("dali", marks=pytest.mark.dali)]


def test_a_substituted_record_carries_the_substitutes_label_and_pixels(store_path, oracle, tmp_path, caplog):
    epoch = 1
    # a bad record whose substitute is a bright crop, so that black pixels would be far off
    bad = next(b for b in range(N)
               if oracle.train(oracles.substitute_index(SEED, epoch, b, 0, N), epoch).mean() > 60)
    damaged = str(tmp_path / ("damaged" + os.path.splitext(store_path)[1]))
    damage_record(store_path, damaged, bad)
    substitute = oracles.substitute_index(SEED, epoch, bad, 0, N)
    loader = loader_for(damaged, on_error="substitute", batch_size=4)
    got = samples(loader, epoch)
    assert len(got) == N
    [record] = loader.stats.bad_records
    assert (record.index, record.substitute, record.epoch) == (bad, substitute, epoch)
    assert record.path == f"class_{bad:03d}/img_{bad:07d}.jpg" and record.reason == "checksum mismatch"
    indices = [i for i, _ in got]
    assert bad not in indices and indices.count(substitute) == 2
    # the bad record's place holds the substitute, with its label and its own ordinary crop
    index, image = got[record.batch * 4 + record.position]
    assert index == substitute
    assert image.mean() > 40, "real pixels, not a black image"
    assert difference(image, oracle.train(substitute, epoch)) < CLOSE_AT_WORST
    twin = [img for k, (i, img) in enumerate(got) if i == substitute and k != record.batch * 4 + record.position]
    assert np.array_equal(image, twin[0]), "the substitute is exactly the substitute's ordinary sample"
    # one warning for the epoch: the ledger's line, naming the file
    lines = [r.getMessage() for r in caplog.records if "bad record" in r.getMessage()]
    assert lines == [loader.stats.ledger.summary(damaged)] and lines[0].startswith(damaged)


# -- batches the caller keeps, and resume ---------------------------------------------------------

def test_batches_the_caller_keeps_are_never_overwritten(store_path):
    loader = loader_for(store_path, batch_size=2, prefetch=1, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    kept, copies = [], []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for x, y in loader:
            kept.append((x, y))
            copies.append((x.clone(), y.clone()))
    assert len(kept) == 2 * N // 2 > loader.config.prefetch + 2, "more batches than buffers in the ring"
    for (x, y), (cx, cy) in zip(kept, copies):
        assert torch.equal(x, cx) and torch.equal(y, cy), "a batch changed after it was handed over"
    assert len({x.data_ptr() for x, _ in kept}) == len(kept)


def test_resume_mid_epoch_yields_exactly_the_remaining_batches(store_path):
    reference = {}
    full = loader_for(store_path, batch_size=3)
    for epoch in (1, 2):
        full.set_epoch(epoch)
        reference[epoch] = [(x.clone(), y.clone()) for x, y in full]
    assert len(reference[1]) == len(full) == 7

    first = loader_for(store_path, batch_size=3)
    first.set_epoch(1)
    seen = []
    for x, y in first:
        seen.append((x.clone(), y.clone()))
        if len(seen) == 3:
            break
    state = first.state_dict()
    first.close()
    assert (state["epoch"], state["batch"]) == (1, 3)

    resumed = loader_for(store_path, batch_size=3)
    resumed.load_state_dict(state)
    rest = [(x.clone(), y.clone()) for x, y in resumed]
    after = [(x.clone(), y.clone()) for x, y in resumed]   # the next iteration: epoch 2 from its start
    assert len(seen) + len(rest) == len(reference[1]) and len(rest) == 4
    for (x, y), (rx, ry) in zip(seen + rest, reference[1]):
        assert torch.equal(y, ry) and torch.equal(x, rx)
    assert len(after) == len(reference[2])
    for (x, y), (rx, ry) in zip(after, reference[2]):
        assert torch.equal(y, ry) and torch.equal(x, rx)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_substitute_that_is_bad_too_gives_way_to_the_next_attempt(store_path, oracle, tmp_path, engine):
    epoch = 2
    # a bad record whose first substitute is bad too, and whose second is a third record
    bad = next(b for b in range(N) if oracles.substitute_index(SEED, epoch, b, 1, N)
               not in (b, oracles.substitute_index(SEED, epoch, b, 0, N)))
    also_bad = oracles.substitute_index(SEED, epoch, bad, 0, N)
    damaged = str(tmp_path / ("damaged" + os.path.splitext(store_path)[1]))
    damage_record(store_path, damaged, bad, also_bad)
    loader = loader_for(damaged, on_error="substitute", batch_size=4, engine=engine)
    got = samples(loader, epoch)
    assert len(got) == N
    records = {r.index: r for r in loader.stats.bad_records}
    assert set(records) == {bad, also_bad}
    for index in (bad, also_bad):
        record = records[index]
        want = first_good_substitute(index, epoch, {bad, also_bad})
        assert record.substitute == want and record.reason == "checksum mismatch"
        delivered, image = got[record.batch * 4 + record.position]
        assert delivered == want
        assert difference(image, oracle.train(want, epoch)) < CLOSE_AT_WORST


@pytest.mark.parametrize("engine", ENGINES)
def test_no_good_substitute_raises_naming_the_bad_record(store_path, tmp_path, engine):
    damaged = str(tmp_path / ("damaged" + os.path.splitext(store_path)[1]))
    damage_record(store_path, damaged, *range(N))
    loader = loader_for(damaged, on_error="substitute", batch_size=4, engine=engine)
    with pytest.raises(Exception) as info:
        samples(loader, 0)
    error = info.value
    assert 0 <= error.index < N and error.path == f"class_{error.index:03d}/img_{error.index:07d}.jpg"
    assert f"record {error.index} ({error.path}) of {damaged}: checksum mismatch: " in str(error)
    assert any(r.index == error.index and r.substitute is None and r.reason == "checksum mismatch"
               for r in loader.stats.bad_records)


@pytest.mark.parametrize("engine", ENGINES)
def test_stopping_an_epoch_early_stops_its_work(store_path, tmp_path, engine):
    """Closing the iterator after the first batch stops the source: the bad record of the
    last batch is never read, so the ledger of that iteration stays empty."""
    damaged = str(tmp_path / ("damaged" + os.path.splitext(store_path)[1]))
    damage_record(store_path, damaged, N - 1)
    loader = loader_for(damaged, shuffle=False, batch_size=2, on_error="substitute", engine=engine)
    assert len(loader) == 10 and loader.config.prefetch + 2 < 10
    it = iter(loader)
    next(it)
    it.close()
    assert loader.stats.bad_records == []
    assert len(samples(loader, 1)) == N and [r.index for r in loader.stats.bad_records] == [N - 1]


@pytest.mark.parametrize("engine", ENGINES)
def test_raise_mode_names_the_record_why_and_what_to_do(store_path, tmp_path, engine):
    damaged = str(tmp_path / ("damaged" + os.path.splitext(store_path)[1]))
    damage_record(store_path, damaged, 3)
    loader = loader_for(damaged, shuffle=False, batch_size=4, engine=engine)
    with pytest.raises(Exception) as info:
        samples(loader, 0)
    error = info.value
    assert (error.index, error.path) == (3, "class_003/img_0000003.jpg")
    message = str(error)
    assert message.startswith(f"record 3 (class_003/img_0000003.jpg) of {damaged}: checksum mismatch: ")
    assert message.endswith("Check the file with `feedline verify`, or pass on_error='substitute'.")
    [record] = loader.stats.bad_records
    assert (record.index, record.substitute, record.reason) == (3, None, "checksum mismatch")
    assert "checksum mismatch" in record.detail and (record.batch, record.position) == (0, 3)


@pytest.mark.parametrize("channels_last,dtype", [(False, torch.float32), (True, torch.float16),
                                                 (False, torch.bfloat16), (False, None)])
def test_every_layout_and_dtype_holds_the_same_normalized_pixels(store_path, channels_last, dtype):
    """(x / 255 - mean) / std of the uint8 samples, whatever the layout and dtype asked for;
    uint8 (mean=None) in either layout is the uint8 samples themselves."""
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    common = dict(shuffle=False, train=False, batch_size=7)
    raw = torch.cat([x for x, _ in loader_for(store_path, **common)]).float()
    want = (raw / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    if dtype is None:   # uint8 output, NCHW contiguous
        got = torch.cat([x for x, _ in loader_for(store_path, output=OutputSpec(mean=None, channels_last=channels_last),
                                                  **common)])
        assert got.dtype == torch.uint8 and got.is_contiguous() and torch.equal(got.float(), raw)
        return
    batches = list(loader_for(store_path, output=OutputSpec(mean=mean, std=std, dtype=dtype, channels_last=channels_last),
                              **common))
    assert len(batches) == 3
    got = torch.cat([x for x, _ in batches])
    layout = torch.channels_last if channels_last else torch.contiguous_format
    assert got.dtype == dtype and all(x.is_contiguous(memory_format=layout) for x, _ in batches)
    tolerance = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}[dtype]
    assert torch.allclose(got.float(), want, atol=tolerance, rtol=tolerance)
