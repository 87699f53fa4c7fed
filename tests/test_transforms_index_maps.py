"""transforms/index_maps.py: the host path's nearest-neighbour geometry (cached index maps and
whole-pixel shifts) gives exactly the pixels of the tensor path it stands for (geometry.warp_np:
torchvision's float32 grid through grid_sample), at every magnitude bin and sign of
RandAugment and TrivialAugmentWide, on 224 x 224 crops and odd sizes, with a fill colour; and
its cache stays within its bytes."""
from __future__ import annotations

import numpy as np
import pytest

import oracles_transforms as oracle
from feedline.transforms import geometry, index_maps
from feedline.transforms.autoaugment import apply_op_np, magnitude

GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")


def tensor_path(op: str, img: np.ndarray, v: float, fill) -> np.ndarray:
    """The pixels of the tensor path: the op's inverse matrix through geometry.warp_np."""
    h, w = img.shape[:2]
    m = {"ShearX": lambda: geometry.shear_x(v, h, w), "ShearY": lambda: geometry.shear_y(v, h, w),
         "TranslateX": lambda: geometry.translate(v, 0.0), "TranslateY": lambda: geometry.translate(0.0, v),
         "Rotate": lambda: geometry.rotate(v)}[op]()
    return geometry.warp_np(img, m, fill)


@pytest.mark.parametrize("h,w", [(224, 224), (37, 53), (160, 224)])
@pytest.mark.parametrize("op", GEOMETRIC)
def test_every_bin_and_sign_is_the_tensor_paths_pixels(op, h, w):
    img = oracle.photo(1, h, w)
    fill = (10, 200, 30) if op in ("Rotate", "TranslateY") else 0
    bins = range(31) if h * w < 10_000 else (1, 9, 17, 30)   # every bin on the small size
    for wide in (False, True):
        for b in bins:
            for sign in (1.0, -1.0):
                v = sign * float(magnitude(op, b, 31, h, w, wide))
                got, want = apply_op_np(op, img, v, fill), tensor_path(op, img, v, fill)
                assert np.array_equal(got, want), (op, wide, b, sign, np.argwhere(got != want)[:3])


def test_maps_hold_the_picked_pixel_and_minus_one_outside():
    m = geometry.rotate(30.0)
    picks = index_maps.source_map(m, 40, 50)
    assert picks.shape == (40, 50, 2) and picks.dtype == np.int16
    outside = (picks == -1).all(axis=2)
    assert outside.any() and not outside.all() and ((picks >= 0).all(axis=2) | outside).all()
    assert np.array_equal(picks[20, 25], [25, 20])   # the centre turns about itself


def test_a_shift_past_the_image_is_all_fill():
    img = oracle.photo(0, 20, 30)
    assert (index_maps.shift(img, 30, 0, (1, 2, 3)) == (1, 2, 3)).all()
    assert (index_maps.shift(img, 0, -20, 7) == 7).all()
    assert np.array_equal(index_maps.shift(img, 0, 0), img)


def test_the_fill_is_rounded_as_the_tensor_paths_uint8():
    assert index_maps.fill_u8((0.5, 1.5, 254.6)) == (0, 2, 255)
    assert index_maps.fill_u8(3) == (3, 3, 3)


def test_the_cache_keeps_to_its_bytes_least_recently_used_out():
    cache = index_maps.MapCache(max_bytes=3 * 400)
    built = []

    def make(k):
        built.append(k)
        return np.full((100,), k, np.int32)   # 400 bytes each
    for k in (0, 1, 2):
        cache.get(k, lambda k=k: make(k))
    cache.get(0, lambda: make(0))          # 0 used again: 1 is now the oldest
    cache.get(3, lambda: make(3))          # over the budget: 1 goes
    assert built == [0, 1, 2, 3] and len(cache) == 3 and cache.nbytes == 1200
    cache.get(1, lambda: make(1))          # built again
    assert built[-1] == 1
    got = cache.get(1, lambda: make(99))
    assert got[0] == 1 and not got.flags.writeable


def test_a_forked_child_gets_a_free_lock_and_keeps_the_maps():
    import os
    import signal
    img = oracle.photo(0, 30, 40)
    m = geometry.rotate(11.0)
    want = index_maps.warp_nearest(img, m)         # the map is cached here
    cache = index_maps._CACHE
    cache._lock.acquire()                          # as if a thread of this process held it at the fork
    try:
        pid = os.fork()
        if pid == 0:                               # the child: would hang on the old lock
            signal.alarm(30)                       # ... and then die rather than hang the test
            ok = np.array_equal(index_maps.warp_nearest(img, m), want) and len(cache) > 0
            os._exit(0 if ok else 1)
    finally:
        cache._lock.release()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
