"""Independent reference implementations for the tests: scalar Python written from the
documented algorithms, never calling feedline. A test compares feedline's vectorized code
with these, so a bug has to be made twice, in two different shapes, to go unnoticed.

- ``uniform``: the counter-based hash feedline.planning.augment documents (splitmix64 of seed,
  epoch, stream, index, then the draw counter), one float at a time.
- ``random_resized_crop``: torchvision's ``RandomResizedCrop.get_params``, line by line,
  with its random draws taken from given uniforms instead of torch's generator.
- ``resize_shorter`` / ``center_crop_offsets`` / ``eval_region``: torchvision's
  ``Resize(int)`` and ``CenterCrop`` geometry, and the source region they show.
- ``shard``: torch's ``DistributedSampler`` (pad by wrapping, then every world_size-th).
- ``substitute_index``: the documented substitute rule (uniform over the other records).

The draw layout of one training sample (``TRAIN_DRAWS`` uniforms) is pinned here: draws
0..9 pick the target areas of the ten attempts, 10..19 their log aspect ratios, 20 the
top, 21 the left, 22 the flip. A checkpoint saved by one version resumes the same crops in
the next only if this layout stays, which is why the tests pin it.
"""
from __future__ import annotations

import math

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
ATTEMPTS = 10                     # torchvision tries 10 random crops before its fallback
TRAIN_DRAWS = 2 * ATTEMPTS + 3    # areas, ratios, top, left, flip
SUBSTITUTE_STREAM = 0x5B57        # the uniforms stream feedline reserves for substitutes


def splitmix64(x: int) -> int:
    """One step of Steele, Lea and Flood's SplitMix64 finalizer on a 64-bit integer."""
    x = (x + GOLDEN) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def uniform(seed: int, epoch: int, index: int, draw: int, stream: int = 0) -> float:
    """Draw number ``draw`` of sample ``index`` in ``epoch``: a float in [0, 1) with 53 bits."""
    key = splitmix64(seed & MASK64)
    key = splitmix64(key ^ (epoch & MASK64))
    key = splitmix64(key ^ stream)
    bits = splitmix64((splitmix64(key ^ (index & MASK64)) + draw) & MASK64)
    return (bits >> 11) / float(1 << 53)


def _unxorshift(x: int, shift: int) -> int:
    """The x with x ^ (x >> shift) == the given value."""
    y = x
    for _ in range(64 // shift + 1):
        y = x ^ (y >> shift)
    return y


def unsplitmix64(y: int) -> int:
    """The inverse of ``splitmix64``: every step is a bijection on 64-bit integers."""
    y = _unxorshift(y, 31)
    y = (y * pow(0x94D049BB133111EB, -1, 1 << 64)) & MASK64
    y = _unxorshift(y, 27)
    y = (y * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & MASK64
    y = _unxorshift(y, 30)
    return (y - GOLDEN) & MASK64


def index_whose_draw_is(seed: int, epoch: int, draw: int, value: float, stream: int = 0) -> int:
    """The sample index (as a signed int64) whose ``draw`` equals ``value`` exactly, a
    multiple of 2**-53 in [0, 1): found by running the hash backwards, to test what the
    code does on a boundary that random draws hit once in 2**53."""
    top = int(value * (1 << 53))
    assert top / float(1 << 53) == value and 0 <= top < 1 << 53
    key = splitmix64(seed & MASK64)
    key = splitmix64(key ^ (epoch & MASK64))
    key = splitmix64(key ^ stream)
    inner = (unsplitmix64(top << 11) - draw) & MASK64
    index = unsplitmix64(inner) ^ key
    return index - (1 << 64) if index >= 1 << 63 else index


def sample_uniforms(seed: int, epoch: int, index: int, draws: int = TRAIN_DRAWS,
                    stream: int = 0) -> list[float]:
    return [uniform(seed, epoch, index, d, stream) for d in range(draws)]


def random_resized_crop(height: int, width: int, u, scale=(0.08, 1.0),
                        ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """torchvision.transforms.RandomResizedCrop.get_params: (top, left, h, w).

    ``u[a]`` stands for attempt a's ``uniform_(scale[0], scale[1])``, ``u[10 + a]`` for its
    ``uniform_(log ratio[0], log ratio[1])``, and ``u[20]``, ``u[21]`` for the
    ``randint(0, height - h + 1)`` and ``randint(0, width - w + 1)`` of the position.
    """
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for attempt in range(ATTEMPTS):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * u[attempt])
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[ATTEMPTS + attempt])
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(math.floor(u[2 * ATTEMPTS] * (height - h + 1)))
            j = int(math.floor(u[2 * ATTEMPTS + 1] * (width - w + 1)))
            return i, j, h, w
    # Fallback to a central crop of the whole image, clamped to the ratio range.
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w = width
        h = height
    return (height - h) // 2, (width - w) // 2, h, w


def train_params(seed: int, epoch: int, index: int, height: int, width: int, scale=(0.08, 1.0),
                 ratio=(3 / 4, 4 / 3), flip: bool = True) -> tuple[tuple[int, int, int, int], bool]:
    """The crop box and flip a training sample gets: torchvision's crop from the pinned
    draws, and a horizontal flip when the last draw is below 1/2 (probability 1/2)."""
    u = sample_uniforms(seed, epoch, index)
    box = random_resized_crop(height, width, u[:2 * ATTEMPTS + 2], scale, ratio)
    return box, flip and u[TRAIN_DRAWS - 1] < 0.5


def resize_shorter(height: int, width: int, short: int) -> tuple[int, int]:
    """torchvision Resize(short) output (height, width): the shorter side becomes ``short``,
    the longer one ``int(short * long / shorter)`` (truncated, as torchvision does)."""
    if width <= height:
        return int(short * height / width), short
    return short, int(short * width / height)


def center_crop_offsets(height: int, width: int, crop_h: int, crop_w: int) -> tuple[int, int]:
    """torchvision F.center_crop's top and left for a crop that fits."""
    return int(round((height - crop_h) / 2.0)), int(round((width - crop_w) / 2.0))


def eval_geometry(height: int, width: int, size: tuple[int, int], crop_fraction: float):
    """Resize(int(min(size) / crop_fraction)) then CenterCrop(size): the resized (h, w) and
    the crop's (top, left, h, w) in resized pixels. None when the crop does not fit the
    resized image (torchvision would pad with zeros there)."""
    rh, rw = resize_shorter(height, width, int(min(size) / crop_fraction))
    if size[0] > rh or size[1] > rw:
        return None
    top, left = center_crop_offsets(rh, rw, size[0], size[1])
    return (rh, rw), (top, left, size[0], size[1])


def eval_region(height: int, width: int, size: tuple[int, int], crop_fraction: float):
    """The part of the source image that Resize + CenterCrop shows, in source pixels
    (floats: top, left, h, w), and the size of one resized pixel in source pixels (sy, sx)."""
    geometry = eval_geometry(height, width, size, crop_fraction)
    if geometry is None:
        return None
    (rh, rw), (top, left, ch, cw) = geometry
    sy, sx = height / rh, width / rw
    return (top * sy, left * sx, ch * sy, cw * sx), (sy, sx)


def shard(order, rank: int, world_size: int) -> list[int]:
    """torch.utils.data.DistributedSampler's share of ``order`` for ``rank`` (drop_last=False)."""
    indices = list(order)
    num_samples = math.ceil(len(indices) / world_size)
    total_size = num_samples * world_size
    padding_size = total_size - len(indices)
    if padding_size <= len(indices):
        indices += indices[:padding_size]
    else:
        indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
    assert len(indices) == total_size
    return indices[rank:total_size:world_size]


def substitute_index(seed: int, epoch: int, index: int, attempt: int, n: int) -> int:
    """The record standing in for bad record ``index`` at ``attempt``: the attempt-th draw of
    the substitute stream picks one of the other n - 1 records, uniformly, in index order
    skipping ``index``."""
    u = uniform(seed, epoch, index, attempt, SUBSTITUTE_STREAM)
    pick = min(int(u * (n - 1)), n - 2)
    return pick + 1 if pick >= index else pick
