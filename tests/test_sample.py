
import numpy as np
import pytest
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


# -- the command ---------------------------------------------------------------

pytestmark = pytest.mark.usefixtures("restore_logging")   # main() calls logging.basicConfig


def sample_cli(*argv, capsys):
    from feedline.cli import main
    code = main(["sample", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_sample_command_prints_progress_lines_to_a_non_terminal(tmp_path, capsys):
    code, out, err = sample_cli(tmp_path / "s", "-n", "20", "--classes", "2", capsys=capsys)
    assert code == 0 and "20 images in 2 classes" in out
    lines = err.strip().splitlines()
    assert lines[0] == f"sample: writing 20 images in 2 classes into {tmp_path / 's'}"
    assert lines[1:] == [f"sample: {k}/20 images ({k * 5}%)" for k in range(2, 21, 2)]
    assert len(list((tmp_path / "s").rglob("*.jpg"))) == 20


def test_sample_refuses_zero_images_and_creates_nothing(tmp_path, capsys):
    code, out, err = sample_cli(tmp_path / "none", "-n", "0", capsys=capsys)
    assert code == 2 and "at least one image" in err and out == ""
    assert not (tmp_path / "none").exists()
    with pytest.raises(ValueError, match="at least one image"):
        make_photo_folder(str(tmp_path / "none"), n=0)


def test_sample_refuses_a_folder_that_is_not_empty_unless_merge(tmp_path, capsys):
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    code, _, err = sample_cli(folder, "-n", "2", capsys=capsys)
    assert code == 2 and "not empty" in err and "--merge" in err
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    code, _, _ = sample_cli(folder, "-n", "2", "--classes", "1", "--merge", capsys=capsys)
    assert code == 0
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*.*")) == \
        ["class_000/img_0000000.jpg", "class_000/img_0000001.jpg", "notes.txt"]
    assert (folder / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    code, _, _ = sample_cli(tmp_path / "empty", "-n", "1", capsys=capsys)
    assert code == 0 and len(list((tmp_path / "empty").rglob("*.jpg"))) == 1


def test_sample_with_fewer_images_than_classes_says_what_it_makes(tmp_path, capsys):
    code, out, err = sample_cli(tmp_path / "few", "-n", "5", "--classes", "10", capsys=capsys)
    assert code == 0
    assert err.splitlines()[0] == (f"sample: writing 5 images in 5 classes (not 10: each class needs an image; "
                                   f"pass -n 10 or more) into {tmp_path / 'few'}")
    assert out.startswith("5 images in 5 classes,")
    assert sorted(p.name for p in (tmp_path / "few").iterdir()) == [f"class_{k:03d}" for k in range(5)]


def test_sample_help_shows_a_plain_percent_and_explains_every_option(capsys):
    from feedline.cli import main
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "every 10% of the images" in text and "%%" not in text
    assert "--seed SEED seed of the crops" in text
