"""The transforms on masks: each geometric op moves a mask onto its image's pixels (the same
picks, nearest, ignore_index where nothing comes from the image), erasing leaves
ignore_index, photometric ops and callables leave the mask, CutMix pastes the partner's mask
in its box, blending mixers are refused. Quadrant images (masks_helpers): a pixel's class says
which colour it has."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from masks_helpers import COLOURS, IGNORE, check_on_pixels, quadrant_image, quadrant_mask

from feedline.transforms import (ColorJitter, CutMix, Mixup, MixUp, RandAugment, RandomErasing,
                                 TimmRandAugment, TrivialAugmentWide)
from feedline.transforms.autoaugment import OPS, apply_op_mask, apply_op_np
from feedline.transforms.index_maps import shift, shift_mask, warp_mask, warp_nearest
from feedline.transforms.runner import BatchTransforms, SampleTransforms
from feedline.transforms.timm_erasing import TimmRandomErasing
from feedline.transforms.timm_geometry import pil_matrix, warp_mask as timm_warp_mask
from feedline.transforms.with_targets import check_transforms_for_targets
from feedline.transforms.geometry import rotate

MASK = quadrant_mask(40, 48, split=(17, 30))
IMAGE = quadrant_image(MASK)


def as_batch(images: np.ndarray, masks: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2), torch.from_numpy(masks)


def painted(mask: np.ndarray) -> np.ndarray:
    """The image a mask says: each class's colour, black where ignored (the torchvision ops' fill)."""
    return quadrant_image(np.where(mask == IGNORE, 0, mask))


@pytest.mark.parametrize("op", ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"])
@pytest.mark.parametrize("v", [0.3, -0.45, 9.0, -13.0, 60.0])
def test_each_geometric_op_moves_the_mask_onto_its_images_pixels(op, v):
    image, mask = apply_op_np(op, IMAGE, v, 0), apply_op_mask(op, MASK.astype(np.int64), v, IGNORE)
    assert np.array_equal(image, painted(mask))   # nearest on both: not one pixel differs
    if abs(v) >= 1 or op.startswith("Shear"):   # moved a pixel or more: something comes from outside
        assert (mask == IGNORE).any()


@pytest.mark.parametrize("op", ["Identity", "Brightness", "Color", "Contrast", "Sharpness", "Posterize",
                                "Solarize", "AutoContrast", "Equalize"])
def test_photometric_ops_leave_the_mask(op):
    assert apply_op_mask(op, MASK, 0.5, IGNORE) is MASK


def test_the_index_maps_of_image_and_mask_agree_past_the_cache():
    m = rotate(33.0)
    assert np.array_equal(warp_nearest(IMAGE, m), painted(warp_mask(MASK.astype(np.int32), m, IGNORE)))
    assert np.array_equal(shift(IMAGE, 7, -5), painted(shift_mask(MASK, 7, -5, IGNORE)))
    assert (shift_mask(MASK, 48, 0, IGNORE) == IGNORE).all()   # moved wholly out


@pytest.mark.parametrize("name", ["Rotate", "ShearX", "TranslateYRel"])
def test_timms_geometry_samples_the_mask_nearest_on_the_images_grid(name):
    """timm's image is bilinear or bicubic: the mask is its nearest pick on the same grid, so
    every pixel inside keeps a class of the image, on its colour away from the edges."""
    matrix = pil_matrix(name, {"Rotate": 25.0, "ShearX": 0.3, "TranslateYRel": 0.3}[name], 40, 48)
    mask = timm_warp_mask(MASK.astype(np.int64), matrix, IGNORE)
    from feedline.transforms.timm_geometry import warp_image
    image = warp_image(IMAGE, matrix, "bilinear", (0, 0, 0))
    check_on_pixels(*as_batch(image[None], mask[None]))
    assert (mask == IGNORE).any() and set(np.unique(mask).tolist()) <= {*COLOURS, IGNORE}


def test_every_auto_augment_under_the_drawn_parameters_of_its_image():
    for transforms in ([RandAugment(num_ops=3, magnitude=20)], [TrivialAugmentWide()]):
        steps = SampleTransforms(transforms + [ColorJitter(0.0)])
        drawn = steps.draw(0, 0, np.arange(40))
        moved = 0
        for i in range(40):
            mask = steps.apply_drawn_to_mask(MASK, drawn, i, IGNORE)
            image = steps.apply_drawn(IMAGE, drawn, i, 0, 0, i)
            ops = [OPS[k] for k in np.atleast_1d(drawn[0]["op"][i])]
            if not set(ops) & {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}:
                assert mask is MASK
                continue
            moved += 1
            if set(ops) <= {"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"}:
                assert np.array_equal(image, painted(mask))   # geometry alone: the image is the mask's picture
        assert moved > 5


def test_a_timm_rand_augment_moves_the_mask_only_for_its_geometric_layers():
    steps = SampleTransforms([TimmRandAugment("rand-m9-n2-mstd0.5")])
    drawn = steps.draw(3, 0, np.arange(30))
    changed = [not np.array_equal(steps.apply_drawn_to_mask(MASK, drawn, i, IGNORE), MASK) for i in range(30)]
    assert any(changed) and not all(changed)


def test_erasing_leaves_ignore_index_in_the_erased_box_alone():
    steps = SampleTransforms([RandomErasing(p=1.0, value=0)])
    drawn = steps.draw(0, 0, [5])
    image = steps.apply_drawn(IMAGE, drawn, 0, 0, 0, 5)
    mask = steps.apply_drawn_to_mask(MASK, drawn, 0, IGNORE)
    erased = mask == IGNORE
    top, left, h, w = RandomErasing(p=1.0, value=0)._boxes(drawn[0], 40, 48)[0]
    assert erased.sum() == h * w > 0 and erased[top:top + h, left:left + w].all()
    assert np.array_equal(mask[~erased], MASK[~erased]) and (image[erased] == 0).all() and image[~erased].all()
    assert RandomErasing(p=0.0).apply_mask(MASK, {"apply": False}, IGNORE) is MASK


def test_a_callable_sees_the_image_alone_and_the_mask_stays():
    steps = SampleTransforms([lambda image, rng: 255 - image])
    assert steps.apply_drawn_to_mask(MASK, steps.draw(0, 0, [0]), 0, IGNORE) is MASK


def test_cutmix_pastes_the_partners_mask_in_its_box():
    """torchvision's pairing: sample i takes sample i - 1's pixels, and mask, in the box."""
    masks = torch.stack([torch.full((8, 8), k) for k in (1, 2, 3)])
    images = masks[:, None].repeat(1, 3, 1, 1).to(torch.uint8)
    cutmix = CutMix(alpha=1.0, num_classes=4, mode="elem")
    params = {"lam": np.array([0.5, 1.0, 0.75]), "cutmix": np.array([True, False, True]),
              "boxes": np.array([[0, 4, 0, 8], [0, 8, 0, 8], [2, 4, 6, 8]])}
    pasted = cutmix.paste_masks(masks, params)
    want = masks.clone()
    want[0, 0:4, :] = 3          # sample 0's partner is the last
    want[2, 2:4, 6:8] = 2
    assert torch.equal(pasted, want)
    assert torch.equal(cutmix.mix_images(images.clone(), params)[:, 0].long(), want)   # pixels and mask agree


def test_batch_transforms_paste_masks_and_erase_them():
    images, masks = as_batch(np.stack([IMAGE] * 4), np.stack([MASK.astype(np.int64)] * 4))
    masks = masks * torch.arange(1, 5).view(4, 1, 1) % 5   # each sample its own classes
    batch = BatchTransforms([CutMix(alpha=1.0, mode="elem")], ignore_index=IGNORE, mask_alone=True)
    _, got = batch.apply(images.clone(), masks.clone(), 0, 0, np.arange(4))
    assert not torch.equal(got, masks)
    erase = BatchTransforms([TimmRandomErasing(probability=1.0)], ignore_index=IGNORE)
    floats = images.float()
    _, got = erase.apply(floats, {"mask": masks.clone()}, 0, 0, np.arange(4))
    erased = (floats == 0).all(1)   # mode "const": the box is 0 in every channel, a colour no quadrant has
    assert erased.flatten(1).any(1).all() and torch.equal(got["mask"] == IGNORE, erased)


@pytest.mark.parametrize("mixer, refused", [(MixUp(), True), ("MixUp", True), (Mixup(), True),
                                            (Mixup(mixup_alpha=0.0, cutmix_alpha=1.0), False), (CutMix(), False),
                                            ("CutMix", False)])
def test_a_store_with_masks_refuses_only_the_mixers_that_blend(mixer, refused):
    fields = {"label": {}, "mask": {"codec": "deflate-rows"}}
    if refused:
        with pytest.raises(ValueError, match="blends another sample into each image, and the store's mask does not"):
            check_transforms_for_targets(fields, (), [mixer])
    else:
        check_transforms_for_targets(fields, [RandAugment()], [mixer])   # geometry too: masks follow it
    with pytest.raises(ValueError, match="boxes do not follow it"):
        check_transforms_for_targets({"boxes": {"max": 1}}, (), [CutMix()])
