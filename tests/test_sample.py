import numpy as np
from PIL import Image

from feedline.sample import make_photo_folder, photo_paths

SIZES = [(64, 48)]


def test_sample_folders_are_deterministic_jpegs_in_imagefolder_layout(tmp_path):
    a = make_photo_folder(str(tmp_path / "a"), n=6, classes=3, seed=2, sizes=SIZES)
    make_photo_folder(str(tmp_path / "b"), n=6, classes=3, seed=2, sizes=SIZES)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.jpg"))
    assert [str(f.parent) for f in files] == ["class_000"] * 2 + ["class_001"] * 2 + ["class_002"] * 2
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
        with Image.open(tmp_path / "a" / f) as im:
            assert im.format == "JPEG" and im.size == (64, 48)
    assert a["images"] == 6 and a["bytes"] > 0
    assert len(photo_paths()) >= 6


def channel_gap(path) -> float:
    rgb = np.asarray(Image.open(path).convert("RGB"), dtype=float).mean(axis=(0, 1))
    return float(np.abs(rgb[0] - rgb[2]))


def test_photo_per_class_gives_each_class_its_own_photo(tmp_path):
    # Sorted photos: astronaut (color), brick (gray), ...: with one photo per class, class 1
    # holds only crops of the gray brick photo; drawn from all photos it would not.
    make_photo_folder(str(tmp_path / "own"), n=16, classes=2, seed=0, sizes=SIZES, photo_per_class=True)
    make_photo_folder(str(tmp_path / "mixed"), n=16, classes=2, seed=0, sizes=SIZES)
    own = [channel_gap(p) for p in (tmp_path / "own" / "class_001").glob("*.jpg")]
    mixed = [channel_gap(p) for p in (tmp_path / "mixed" / "class_001").glob("*.jpg")]
    assert max(own) < 3 and max(mixed) > 10
