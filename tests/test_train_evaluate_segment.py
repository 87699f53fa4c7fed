"""`feedline train --task segment`: an FCN head on the tiny and ResNet backbones learns the
quadrant masks (masks_helpers) on the CPU and reports mIoU; the IoU by hand; what is refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from masks_helpers import mask_folder, packed
from test_train_helpers import FAST, events, one_line_error, run
from test_train_helpers import restore_torch_globals  # noqa: F401 -- autouse: torch's globals put back

from converters import pack
from feedline.train.evaluate_segment import iou_per_class
from feedline.train.models import build_model
from feedline.train.task import IGNORE_INDEX, SEGMENTATION, FieldLoss


def test_iou_per_class_by_hand():
    """Rows true, columns predicted. Class 0: 3 hits of 3 + 1 + 1 = 5 pixels touched; class 1:
    1 of 1 + 1 + 2; class 2 never seen nor predicted: NaN, out of the mean."""
    confusion = np.array([[3, 1, 0], [2, 1, 0], [0, 0, 0]])
    iou = iou_per_class(confusion)
    assert iou[0] == pytest.approx(3 / 6) and iou[1] == pytest.approx(1 / 4) and np.isnan(iou[2])


@pytest.mark.parametrize("arch", ["tiny", "resnet18"])
def test_a_segmentation_model_scores_every_class_at_every_pixel(arch):
    model = build_model(arch, num_classes=5, segment=True).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 3, 48, 64))
    assert out.shape == (2, 5, 48, 64)


def test_the_loss_leaves_out_ignored_pixels():
    scores = torch.zeros(1, 3, 2, 2)
    scores[0, 1] = 10.0   # class 1 everywhere, surely
    masks = torch.tensor([[[1, 1], [IGNORE_INDEX, 0]]])
    loss = FieldLoss(SEGMENTATION, "mask")(scores, masks, reduction="sum")
    wrong = torch.nn.functional.cross_entropy(scores[0, :, 1, 1][None], torch.tensor([0]))   # the one wrong pixel
    right = torch.nn.functional.cross_entropy(scores[0, :, 0, 0][None], torch.tensor([1]))
    assert loss.item() == pytest.approx(wrong.item() + 2 * right.item(), rel=1e-5)


def test_a_store_with_masks_trains_an_fcn_and_reports_miou(tmp_path):
    train, _ = packed(str(tmp_path / "t"), out="train.lmdb", n=24, label=False)
    out = tmp_path / "run"
    assert run([train, "--val", train, *FAST, "--epochs", "4", "--lr", "0.1", "--warmup-epochs", "0.25",
                "--smoothing", "0", "--synthetic-steps", "2", "--out", out]) == 0
    scores = [e["mIoU"] for e in events(out, "epoch")]
    assert len(scores) == 4 and all(0.0 <= s <= 1.0 for s in scores)
    assert scores[-1] > scores[0] and scores[-1] > 0.35   # four quadrant classes, learnt in four epochs
    start = events(out, "start")[0]
    assert start["num_classes"] == 5   # classes 0..4: 0 in no mask, but the model has an output for it


def test_a_store_with_masks_and_labels_says_which_to_learn(tmp_path, capsys):
    train, _ = packed(str(tmp_path / "t"), out="train.lmdb", n=4)
    line = one_line_error(capsys, [train, *FAST, "--epochs", "1", "--batch-size", "2", "--out", tmp_path / "r"])
    assert "--task classify (label), --task segment (mask)" in line


def test_validation_masks_with_more_classes_than_trainings_are_refused(tmp_path, capsys):
    train, _ = packed(str(tmp_path / "t"), out="train.lmdb", n=4, label=False)
    src, labels, _ = mask_folder(str(tmp_path / "v"), n=4, scale=3, label=False)   # classes 3, 6, 9, 12
    pack(src, str(tmp_path / "val.lmdb"), labels_csv=labels, progress=False)
    line = one_line_error(capsys, [train, "--val", tmp_path / "val.lmdb", *FAST, "--batch-size", "2",
                                   "--out", tmp_path / "r"])
    assert "masks hold classes up to 12, beyond the 5 of TRAIN" in line


def test_masks_with_nothing_but_ignore_index_have_nothing_to_learn(tmp_path, capsys):
    from PIL import Image
    src = tmp_path / "src"
    src.mkdir()
    rows = ["path,mask"]
    for i in range(4):
        Image.fromarray(np.full((16, 16, 3), 90, np.uint8)).save(src / f"{i}.png")
        Image.fromarray(np.full((16, 16), IGNORE_INDEX, np.uint8)).save(src / f"{i}_mask.png")
        rows.append(f"{i}.png,{i}_mask.png")
    (tmp_path / "l.csv").write_text("\n".join(rows) + "\n")
    pack(str(src), str(tmp_path / "t.lmdb"), labels_csv=str(tmp_path / "l.csv"), progress=False)
    line = one_line_error(capsys, [tmp_path / "t.lmdb", *FAST, "--batch-size", "2", "--out", tmp_path / "r"])
    assert "its masks hold no class but 255 (ignored): nothing to learn" in line
