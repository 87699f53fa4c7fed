"""feedline.dataset.show and `feedline show STORE`: one batch as the loader delivers it, as a PNG grid
with its targets drawn. Tried on real packed stores: the picture has the grid's size, its
images are the delivered pixels un-normalized, and a box's outline lies where the box is."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from feedline import FeedLoader
from feedline.cli import main as cli_main
from feedline.cli.show import ShowConfig
from feedline.dataset.show import PALETTE, Grid, caption, pixels
from feedline.train.recipe import sample_transforms


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """A packed store with every field: labels, boxes and keypoints (tests/targets_helpers.py)."""
    from converters import pack
    from targets_helpers import labelled_folder
    root = tmp_path_factory.mktemp("scene")
    folder, labels = labelled_folder(root, n=12)
    return pack(folder, str(root / "scene.lmdb"), labels_csv=labels).out


def shown(store, out, *flags) -> Image.Image:
    assert cli_main(["show", str(store), "--out", str(out), *map(str, flags)]) == 0
    return Image.open(out).convert("RGB")


def test_the_grid_by_hand():
    """64-pixel images scale by 2 (to 128); a cell is 128 wide, 128 + 28 (caption) high; 4
    pixels around and between: 3 columns, 2 rows -> 3*128 + 4*4 = 400 by 2*156 + 3*4 = 324."""
    grid = Grid.of(6, 64, 64, columns=3)
    assert (grid.scale, grid.cell, grid.size) == (2, (128, 156), (400, 324))
    assert grid.origin(0) == (4, 4) and grid.origin(4) == (4 + 132, 4 + 160)
    assert Grid.of(16, 224, 224).size == (4 * 224 + 5 * 4, 4 * (224 + 28) + 5 * 4) and Grid.of(5, 32, 48).columns == 3


def test_boxes_are_drawn_where_the_loader_put_them(scene, tmp_path):
    picture = shown(scene, tmp_path / "batch.png", "--size", 64, "-b", 6, "--columns", 3)
    bare = shown(scene, tmp_path / "bare.png", "--size", 64, "-b", 6, "--columns", 3, "--no-annotate")
    assert picture.size == bare.size == (400, 324)
    with FeedLoader(scene, batch_size=6, size=64, device="cpu", num_workers=0, seed=0) as loader:   # the same batch
        images, targets = next(iter(loader))
    grid, checked = Grid.of(6, 64, 64, columns=3), 0
    for i in range(6):
        if int(targets["box_counts"][i]) != 1:
            continue
        x0, y0, x1, y1 = targets["boxes"][i, 0].tolist()
        ox, oy = grid.origin(i)
        x, y = ox + int(x0 * 2) + 1, oy + int((y0 + y1) / 2 * 2)   # inside the 2-pixel left edge, half-way down
        points = targets["keypoints"][i]
        if any(v > 0 and abs(ox + px * 2 - x) < 12 and abs(oy + py * 2 - y) < 12 for px, py, v in points.tolist()):
            continue
        assert picture.getpixel((x, y)) == PALETTE[int(targets["box_classes"][i, 0]) % len(PALETTE)]
        if x0 >= 2:   # beside the edge, outside the box: the image itself
            assert picture.getpixel((x - 4, y)) == bare.getpixel((x - 4, y))
        checked += 1
    assert checked >= 1


def test_the_images_are_the_delivered_pixels_un_normalized(packed_lmdb, tmp_path):
    """--train (RandomResizedCrop, flip, the trainer's ColorJitter): the picture's image i is
    the loader's uint8 image i (mean=None) within a grey level: normalizing and un-normalizing
    lose no more."""
    picture = np.asarray(shown(packed_lmdb, tmp_path / "train.png", "--train", "--size", 32, "-b", 4, "--epoch", 1,
                               "--batch", 2, "--seed", 3))
    recipe = sample_transforms(ShowConfig(store=str(packed_lmdb), train=True))   # the trainer's: ColorJitter(0.4)
    assert len(recipe) == 1
    with FeedLoader(str(packed_lmdb), batch_size=4, shuffle=True, train=True, size=32, device="cpu", num_workers=0,
                    seed=3, mean=None, transforms=recipe) as loader:
        loader.set_epoch(1)
        batches = iter(loader)
        for _ in range(2):
            next(batches)
        raw = next(batches)[0].permute(0, 2, 3, 1).numpy()
    grid = Grid.of(4, 32, 32)
    for i in range(4):
        ox, oy = grid.origin(i)
        tile = picture[oy:oy + 32 * grid.scale:grid.scale, ox:ox + 32 * grid.scale:grid.scale]
        assert np.abs(tile.astype(int) - raw[i].astype(int)).max() <= 1


def test_un_normalizing_and_captions_by_hand():
    mean, std = (0.5, 0.25, 0.0), (0.5, 0.25, 1.0)
    x = torch.tensor([[[[0.0]], [[2.0]], [[0.1]]]])   # (0.5, 0.75, 0.1) of 255 once un-normalized
    assert pixels(x, mean, std).tolist() == [[[[128, 191, 26]]]]
    assert pixels(torch.tensor([[[[7]], [[8]], [[9]]]], dtype=torch.uint8), mean, std).tolist() == [[[[7, 8, 9]]]]
    names = {"label": ["ant", "bee", "cat"], "labels": ["x", "y", "z"]}
    assert caption({"label": torch.tensor([2, 0])}, 0, names) == ["cat"]
    assert caption({"label": torch.tensor([[0.0, 0.3, 0.7]])}, 0, names) == ["cat 0.70", "+ bee 0.30"]
    assert caption({"labels": torch.tensor([[1.0, 0.0, 1.0]]), "target": torch.tensor([[0.5, -2.0]])}, 0, names) == \
        ["x, z", "target 0.5 -2"]


def test_recipe_flags_need_train_and_a_batch_past_the_epoch_is_refused(packed_lmdb, tmp_path, capsys):
    assert cli_main(["show", str(packed_lmdb), "--aa", "rand-m9-mstd0.5", "--out", str(tmp_path / "x.png")]) == 2
    assert "--aa shape training batches: pass --train to see them" in capsys.readouterr().err
    assert cli_main(["show", str(packed_lmdb), "-b", "16", "--batch", "3", "--out", str(tmp_path / "x.png")]) == 2
    assert "--batch 3: an epoch of" in capsys.readouterr().err and not (tmp_path / "x.png").exists()


def test_a_masks_classes_are_blended_over_their_pixels(tmp_path):
    """Each class but 0 takes MASK_ALPHA / 255 of its colour over the image, 255 (ignored) grey;
    drawn on a flat gray image, a pixel of class k is gray + alpha * (colour - gray)."""
    from feedline.dataset.show import IGNORED, MASK_ALPHA, batch_picture
    images = torch.full((1, 3, 8, 8), 100, dtype=torch.uint8)
    mask = torch.zeros(1, 8, 8, dtype=torch.int64)
    mask[0, :4, :4], mask[0, 4:, 4:] = 3, 255
    picture = np.asarray(batch_picture(images, {"mask": mask}, fields={"mask": {}}, class_lists={}))
    grid = Grid.of(1, 8, 8)
    x0, y0 = grid.origin(0)
    at = lambda r, c: picture[y0 + r * grid.scale + 1, x0 + c * grid.scale + 1].astype(int)   # noqa: E731
    blend = lambda colour: np.round(100 + MASK_ALPHA / 255 * (np.asarray(colour) - 100))   # noqa: E731
    assert np.abs(at(1, 1) - blend(PALETTE[3])).max() <= 1
    assert np.abs(at(6, 6) - blend(IGNORED)).max() <= 1
    assert at(1, 6).tolist() == [100, 100, 100]   # class 0: the image as it is
