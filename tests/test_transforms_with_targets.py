"""Built-in transforms a store with boxes refuses (geometric ops and mixers), by name, and the
ones it keeps (photometric), against the transform classes themselves."""
from __future__ import annotations

import pytest

from feedline.transforms import (ColorJitter, CutMix, GaussianBlur, MixUp, Mixup, RandAugment, RandomErasing,
                                 RandomGrayscale, TransformError, TrivialAugmentWide)
from feedline.transforms.with_targets import check_transforms_for_targets

BOXES = {"label": {}, "boxes": {"max": 3}}


@pytest.mark.parametrize("make, name", [(RandAugment, "RandAugment"), (TrivialAugmentWide, "TrivialAugmentWide"),
                                        (lambda: RandAugment(num_ops=1, magnitude=0), "RandAugment")])
def test_geometric_built_ins_are_refused_with_boxes_naming_the_transform(make, name):
    with pytest.raises(TransformError, match=rf"transforms\[1\]: {name} shears, translates and rotates"):
        check_transforms_for_targets(BOXES, [ColorJitter(0.2), make()])


@pytest.mark.parametrize("mixer", [MixUp(num_classes=4), CutMix(num_classes=4), Mixup(num_classes=4)])
def test_mixers_are_refused_with_boxes(mixer):
    with pytest.raises(TransformError, match=rf"batch_transforms\[0\]: {type(mixer).__name__} blends or pastes"):
        check_transforms_for_targets(BOXES, batch_transforms=[mixer])


def test_photometric_transforms_pass_with_boxes():
    check_transforms_for_targets(BOXES, [ColorJitter(0.4, 0.4), RandomGrayscale(), GaussianBlur(3),
                                         RandomErasing(p=1.0)])


@pytest.mark.parametrize("fields", [{"label": {}}, {"labels": {"max": 2}, "target": {"width": 1, "scalar": True}},
                                    ("label", "labels")])
def test_without_boxes_every_built_in_passes(fields):
    check_transforms_for_targets(fields, [RandAugment(), TrivialAugmentWide()], [MixUp(num_classes=4)])


def test_a_single_transform_or_none_is_read_as_a_list():
    check_transforms_for_targets(BOXES, None, None)
    with pytest.raises(TransformError, match="TrivialAugmentWide"):
        check_transforms_for_targets(BOXES, TrivialAugmentWide())
