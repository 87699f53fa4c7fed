"""transforms/erasing.py: RandomErasing's boxes, fill and noise against torchvision's
definitions."""
from __future__ import annotations

from draws_helpers import INDICES
import numpy as np


import torch
import oracles_transforms as oracle
from feedline.transforms import RandomErasing


from feedline.transforms.erasing import erase_boxes

PHOTOS = [oracle.photo(i) for i in range(3)]


def batched(fn, img: np.ndarray, *args) -> np.ndarray:
    """Run a torch op on a batch of one built from ``img``; back to uint8 H x W x 3."""
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    out = fn(x, *args)
    assert out.dtype == torch.float32 and torch.equal(out, out.round())  # whole numbers
    return out[0].permute(1, 2, 0).numpy().astype(np.uint8)


def test_erase_boxes_follow_torchvisions_get_params():
    rng = np.random.default_rng(5)
    u = rng.random((400, 22))
    for scale, ratio, (h, w) in [((0.02, 0.33), (0.3, 3.3), (72, 96)), ((0.7, 1.0), (0.2, 5.0), (40, 30))]:
        boxes = erase_boxes(u, h, w, scale, ratio)
        want = [oracle.erase_params(list(r), h, w, scale, ratio) for r in u]
        assert [tuple(b) for b in boxes.tolist()] == want
        assert any(b[2] == 0 for b in want) == (scale[0] >= 0.7)  # big boxes sometimes never fit


def test_random_erasing_fills_exactly_its_box():
    op = RandomErasing(p=1.0, value=(7, 8, 9))
    img = PHOTOS[1]
    u = np.random.default_rng(1).random((1, 22))
    top, left, h, w = erase_boxes(u, *img.shape[:2], op.scale, op.ratio)[0]
    assert h > 0
    want = img.copy()
    want[top:top + h, left:left + w] = (7, 8, 9)
    p = {"apply": True, "u": u[0]}
    assert np.array_equal(op.apply_cpu(img, p), want)
    assert np.array_equal(batched(lambda x: op.apply_torch(x, {"apply": np.array([True]), "u": u}), img), want)
    assert np.array_equal(op.apply_cpu(img, {"apply": False, "u": u[0]}), img)


def test_random_erasing_noise_is_normalized_normal_noise_in_pixel_units_on_both_paths():
    op = RandomErasing(p=1.0, scale=(0.3, 0.3), ratio=(1.0, 1.0), value="random")
    x = torch.from_numpy(np.stack(PHOTOS)).permute(0, 3, 1, 2)
    params = op.draw(2, 0, np.arange(3))
    host = np.stack([op.apply_cpu(img, {k: v[i] for k, v in params.items()}) for i, img in enumerate(PHOTOS)])
    dev = op.apply_torch(x.float(), params).permute(0, 2, 3, 1).numpy()
    assert np.array_equal(host, dev)
    top, left, h, w = op._boxes(params, 72, 96)[0]
    patch = host[0, top:top + h, left:left + w].reshape(-1, 3).astype(np.float64)
    assert np.allclose(patch.mean(0), 255 * np.array(op.mean), atol=6)
    assert np.allclose(patch.std(0), 255 * np.array(op.std), atol=6)
    again = op.apply_cpu(PHOTOS[0], {k: v[0] for k, v in op.draw(2, 0, [0]).items()})
    assert np.array_equal(again, host[0])
    assert not np.array_equal(host[1][top:top + h, left:left + w], host[0][top:top + h, left:left + w])


def test_erase_boxes_cover_the_scale_range_with_log_uniform_ratios():
    op = RandomErasing(1.0, scale=(0.02, 0.2), ratio=(0.5, 2.0))
    boxes = op._boxes(op.draw(1, 0, INDICES), 224, 224)
    area = boxes[:, 2] * boxes[:, 3] / 224 ** 2
    assert (boxes[:, 2] > 0).all() and 0.015 < area.min() and area.max() < 0.21
    assert abs(area.mean() - 0.11) < 0.005
    assert abs(np.log(boxes[:, 2] / boxes[:, 3]).mean()) < 0.02  # symmetric in log ratio
    assert (boxes[:, 0] + boxes[:, 2] <= 224).all() and (boxes[:, 1] + boxes[:, 3] <= 224).all()
