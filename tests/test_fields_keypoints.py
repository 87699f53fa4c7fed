"""Keypoints, the field kind added as one module plus its registry line: through a labels file,
a pack, info, verify and FeedLoader, against points worked out by hand."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import feedline
from converters import pack
from feedline import FeedLoader
from feedline.planning.augment import AugmentSpec
from feedline.planning.augment import plan as plan_augment
from feedline.dataset.describe import describe, format_info
from feedline.core.errors import FeedlineError, PackError
from feedline.fields.keypoints import to_output
from feedline.dataset.labels_file import read_labels_file
from feedline.sample import make_photo_folder
from feedline.transforms import ColorJitter, MixUp, RandAugment, TransformError
from feedline.transforms.with_targets import check_transforms_for_targets
from feedline.dataset.verify import verify

# A crop of rows 10..50 and columns 20..100 of the source, resized to 20 x 40 (half size).
CROP, SIZE = [10, 20, 40, 80], (20, 40)
POINTS = [[30, 20, 2],     # inside: ((30 - 20) / 2, (20 - 10) / 2) = (5, 5)
          [100, 50, 1],    # on the crop's corner, hidden: (40, 20), still 1
          [10, 20, 2],     # left of the crop: (0, 0, 0)
          [50, 30, 0]]     # not labelled: (0, 0, 0)


def test_points_follow_the_crop_by_hand():
    got = to_output([POINTS], [CROP], [False], SIZE)
    assert got.dtype == np.float32 and got.shape == (1, 4, 3)
    assert got[0].tolist() == [[5, 5, 2], [40, 20, 1], [0, 0, 0], [0, 0, 0]]


def test_a_flip_mirrors_x_in_the_output():
    got = to_output([POINTS], [CROP], [True], SIZE)
    assert got[0].tolist() == [[35, 5, 2], [0, 20, 1], [0, 0, 0], [0, 0, 0]]   # x -> 40 - x


def test_a_crop_of_no_area_leaves_nothing_visible():
    assert not to_output([POINTS], [[0, 0, 0, 0]], [False], SIZE).any()


def write_jsonl(path, rows) -> str:
    with open(path, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Four 96 x 128 (height x width) photos with 3 keypoints each, by hand."""
    root = tmp_path_factory.mktemp("keypoints")
    src = str(root / "src")
    make_photo_folder(src, n=4, classes=1, seed=1, sizes=[(128, 96)])   # (width, height)
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    points = [[[64, 48, 2], [10, 50, 2], [106, 91, 1]], [[1, 2, 2], [3, 4, 0], [127, 95, 2]],
              [[64, 48, 2], [64, 48, 2], [0, 0, 0]], [[20.5, 30.25, 1], [100, 10, 2], [50, 50, 2]]]
    labels = write_jsonl(root / "kp.jsonl", [{"path": r, "keypoints": p} for r, p in zip(rels, points)])
    return src, labels, dict(zip(rels, points))


@pytest.fixture(scope="module")
def store_path(folder, tmp_path_factory):
    src, labels, _ = folder
    out = str(tmp_path_factory.mktemp("kp_pack") / "kp.lmdb")
    pack(src, out, labels_csv=labels, progress=False)
    return out


def test_keypoints_are_stored_shown_and_verified(folder, store_path):
    _, _, points = folder
    with feedline.open_dataset(store_path) as ds:
        assert ds.fields == {"keypoints": {"count": 3}} and ds.class_lists == {}
        assert {ds.path(i): ds.targets(i)["keypoints"] for i in range(len(ds))} == points
    info = describe(store_path)
    assert info.fields["keypoints"] == {"count": 3, "visible_per_image": {"min": 2, "mean": 2.5, "max": 3}}   # 3, 2, 2, 3 labelled
    assert "keypoints (3 per image, mean 2.50 labelled)" in format_info(info)
    assert verify(store_path, mode="checksums").ok


def test_the_labels_file_refuses_what_would_be_misread(tmp_path):
    with pytest.raises(FeedlineError, match=r"line 2: 2 keypoints, but line 1 has 1: every image needs the same"):
        read_labels_file(write_jsonl(tmp_path / "a.jsonl", [{"path": "a.jpg", "keypoints": [[1, 2, 2]]},
                                                            {"path": "b.jpg", "keypoints": [[1, 2, 2], [3, 4, 2]]}]))
    with pytest.raises(FeedlineError, match=r"keypoint 0 \[1, 2, 3\]: visible is 3, not 0"):
        read_labels_file(write_jsonl(tmp_path / "b.jsonl", [{"path": "a.jpg", "keypoints": [[1, 2, 3]]}]))
    with pytest.raises(FeedlineError, match=r"keypoint 0 \[1, 2\] is not \[x, y, visible\]"):
        read_labels_file(write_jsonl(tmp_path / "c.jsonl", [{"path": "a.jpg", "keypoints": [[1, 2]]}]))
    (tmp_path / "d.csv").write_text("path,keypoints\na.jpg,1\n")
    with pytest.raises(FeedlineError, match="keypoints need a JSON Lines file"):
        read_labels_file(str(tmp_path / "d.csv"))


def test_a_labelled_point_outside_its_image_is_refused_at_pack_time_with_its_row(folder, tmp_path):
    src, _, points = folder
    rels = sorted(points)
    rows = [{"path": r, "keypoints": p} for r, p in points.items()]
    rows[2]["keypoints"] = [[64, 48, 2], [129, 10, 2], [0, 0, 0]]   # x beyond the 128 pixels of its width
    labels = write_jsonl(tmp_path / "bad.jsonl", rows)
    out = tmp_path / "bad.lmdb"
    with pytest.raises(PackError, match=rf"bad.jsonl: line 3 \({rels[2]}\): keypoint 1 \[129.0, 10.0, 2.0\] is "
                                        r"labelled but outside its 128x96 \(WxH\) image"):
        pack(src, str(out), labels_csv=labels, progress=False)
    assert not out.exists()


def test_transforms_boxes_refuse_are_refused_with_keypoints():
    fields = {"keypoints": {"count": 3}}
    with pytest.raises(TransformError, match=r"transforms\[0\]: RandAugment shears.* store's keypoints do not"):
        check_transforms_for_targets(fields, [RandAugment()])
    with pytest.raises(TransformError, match=r"batch_transforms\[0\]: MixUp blends"):
        check_transforms_for_targets(fields, batch_transforms=[MixUp(num_classes=2)])
    check_transforms_for_targets(fields, [ColorJitter(0.2)])


KW = dict(batch_size=2, size=48, num_workers=2, device="cpu", decoder="pil")


def test_the_loader_delivers_points_in_the_evaluation_crops_pixels(folder, store_path):
    """Resize(int(48 / 0.875) = 54) of a 96 x 128 image is 54 x 72 (one resized pixel is 16/9
    source pixels), CenterCrop(48) starts at (3, 12) resized: the source box top 16/3, left
    64/3, 256/3 x 256/3, by hand: x -> (x - 64/3) * 9/16, y -> (y - 16/3) * 9/16."""
    _, _, points = folder
    want = {(64, 48): [(64 - 64 / 3) * 9 / 16, (48 - 16 / 3) * 9 / 16]}   # (24, 24)
    with FeedLoader(store_path, shuffle=False, train=False, **KW) as loader:
        rows = [t for _, targets in loader for t in targets]
        assert loader.store.size(0) == (96, 128)
    assert all(t.dtype == torch.float32 and t.shape == (3, 3) for t in rows)
    # record 0: (64, 48, 2), (10, 50, 2) left of the crop, (106, 91, 1) a third of a pixel below it
    first = rows[0].tolist()
    np.testing.assert_allclose(first, [[24, 24, 2], [0, 0, 0], [0, 0, 0]], rtol=1e-6)
    assert want[(64, 48)] == pytest.approx([24, 24])
    assert rows[1].tolist()[0] == [0, 0, 0]   # (1, 2) is above and left of the crop


def test_the_loader_delivers_points_through_random_crops_and_flips(folder, store_path):
    """Each delivered row is its record's points through that record's RandomResizedCrop and
    flip of the epoch (the plan's, a pure function of seed, epoch and index)."""
    with FeedLoader(store_path, shuffle=True, train=True, seed=5, **KW) as loader:
        store = loader.store
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            seen = []
            for _, targets in loader:
                seen += [t.numpy().copy() for t in targets]
            spec = AugmentSpec(size=(48, 48), train=True)
            assert len(seen) == len(store)
            delivered = {tuple(row.reshape(-1).round(4)) for row in seen}
            expected = set()
            for i in range(len(store)):
                crops, flips = plan_augment(spec, 5, epoch, [i], [96], [128])
                expected.add(tuple(to_output([store.targets(i)["keypoints"]], crops, flips, (48, 48))[0]
                                   .reshape(-1).round(4)))
            assert delivered == expected


# -- flip_pairs: a mirror trades left and right --------------------------------------------------

def test_a_flip_trades_the_paired_points_by_hand():
    """Points 0 and 1 are a pair: flipped, slot 0 holds point 1 mirrored, slot 1 point 0's;
    point 2 (no pair) and point 3 (not labelled) stay where they are."""
    got = to_output([POINTS, POINTS], [CROP, CROP], [True, False], SIZE, permutation=[1, 0, 2, 3])
    assert got[0].tolist() == [[0, 20, 1], [35, 5, 2], [0, 0, 0], [0, 0, 0]]
    assert got[1].tolist() == [[5, 5, 2], [40, 20, 1], [0, 0, 0], [0, 0, 0]]   # not flipped: as it was


def test_the_keypoints_fill_applies_its_flip_pairs():
    from feedline.fields.keypoints import Keypoints
    field = Keypoints({"count": 4, "flip_pairs": [[0, 1], [2, 3]]})
    assert field.permutation().tolist() == [1, 0, 3, 2]
    a = {"keypoints": np.array(POINTS, dtype=np.float32).reshape(-1)}
    out = {"keypoints": np.zeros((1, 4, 3), np.float32)}
    from feedline.fields import Geometry
    field.fill(a, np.array([0]), out, 1, Geometry(np.array([CROP]), np.array([True]), SIZE))
    assert out["keypoints"][0].tolist() == [[0, 20, 1], [35, 5, 2], [0, 0, 0], [0, 0, 0]]
    old = Keypoints({"count": 4})   # a store packed without them: a flip keeps each index
    old.fill(a, np.array([0]), out, 1, Geometry(np.array([CROP]), np.array([True]), SIZE))
    assert out["keypoints"][0].tolist() == [[35, 5, 2], [0, 20, 1], [0, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize("pairs,words", [([[0, 3]], r"\[0, 3\]: expected two point indices in 0..2"),
                                         ([[0, 1], [1, 2]], "point 1 is in more than one pair"),
                                         ([[2, 2]], "point 2 is in more than one pair"),
                                         ([[0, True]], "expected two point indices"),
                                         ([[0, 1, 2]], "expected two point indices")])
def test_flip_pairs_that_do_not_fit_the_points_are_refused(pairs, words):
    from feedline.fields import FieldsError
    from feedline.fields.keypoints import Keypoints
    with pytest.raises(FieldsError, match=words):
        Keypoints({"count": 3, "flip_pairs": pairs})


def test_flip_pairs_are_stored_with_the_data_set_and_every_flip_applies_them(folder, tmp_path):
    src, labels, _ = folder
    out = str(tmp_path / "pairs.lmdb")
    pack(src, out, labels_csv=labels, flip_pairs=((0, 2),), progress=False)
    with feedline.open_dataset(out) as ds:
        assert ds.fields == {"keypoints": {"count": 3, "flip_pairs": [[0, 2]]}}
        assert ds.meta["pack_options"]["flip_pairs"] == [[0, 2]]
        points = [ds.targets(i)["keypoints"] for i in range(len(ds))]
    assert "1 left/right pairs" in format_info(describe(out))
    spec = AugmentSpec(size=(48, 48), train=True)
    with FeedLoader(out, shuffle=False, train=True, seed=3, **KW) as loader:
        rows = [t.numpy().copy() for _, targets in loader for t in targets]
    flipped = 0
    for i, row in enumerate(rows):
        crops, flips = plan_augment(spec, 3, 0, [i], [96], [128])
        mirrored = to_output([points[i]], crops, flips, (48, 48))[0]   # each point at its own index
        want = mirrored[[2, 1, 0]] if flips[0] else mirrored
        np.testing.assert_allclose(row, want, rtol=1e-6)
        flipped += bool(flips[0])
    assert 0 < flipped < len(rows)   # both cases seen with seed 3


def test_flip_pairs_without_keypoints_are_refused(tmp_path):
    src = str(tmp_path / "src")
    make_photo_folder(src, n=2, classes=1, seed=1, sizes=[(64, 48)])
    with pytest.raises(PackError, match="--flip-pairs: .* has no labels file with keypoints"):
        pack(src, str(tmp_path / "o.lmdb"), flip_pairs=((0, 1),), progress=False)
    rels = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs)
    labels = write_jsonl(tmp_path / "b.jsonl", [{"path": r, "boxes": [[1, 1, 5, 5, "car"]]} for r in rels])
    with pytest.raises(PackError, match="--flip-pairs: .*b.jsonl: the labels have no keypoints to take flip_pairs"):
        pack(src, str(tmp_path / "o.lmdb"), labels_csv=labels, flip_pairs=((0, 1),), progress=False)


def test_the_cli_reads_flip_pairs_and_says_what_it_wants(folder, tmp_path, capsys):
    from feedline import cli
    src, labels, _ = folder
    out = str(tmp_path / "cli.lmdb")
    assert cli.main(["pack", src, out, "--labels", labels, "--flip-pairs", "0:2", "--quiet"]) == 0
    with feedline.open_dataset(out) as ds:
        assert ds.fields["keypoints"]["flip_pairs"] == [[0, 2]]
    assert cli.main(["pack", src, str(tmp_path / "bad.lmdb"), "--labels", labels, "--flip-pairs", "0-2"]) != 0
    assert "--flip-pairs '0-2': '0-2' is not A:B" in capsys.readouterr().err
    assert cli.main(["pack", src, str(tmp_path / "bad.lmdb"), "--labels", labels, "--flip-pairs", "0:5"]) != 0
    assert "expected two point indices in 0..2" in capsys.readouterr().err
