"""sources/rows.py: what a worker writes into row j of a Slot's arena: the decoded pixels in
place, or the sample normalized by lookup table into the output's dtype and layout, equal
to (x / 255 - mean) / std written out by hand; no other row touched."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from feedline.core.config import OutputSpec
from feedline.sources.arena import Arena
from feedline.sources.ring import row_format
from feedline.sources.rows import RowFormat, RowWriter


def writer(fmt: RowFormat) -> RowWriter:
    return RowWriter(fmt, Arena(fmt.nbytes, shared=False).memory)


def sample(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (5, 7, 3), dtype=np.uint8)


@pytest.mark.parametrize("dtype,channels_last", [(torch.float32, True), (torch.float32, False),
                                                  (torch.float16, True), (torch.float16, False)])
def test_a_written_row_is_the_normalized_sample_in_the_outputs_layout(dtype, channels_last):
    output = OutputSpec(mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3), dtype=dtype, channels_last=channels_last,
                        device="cpu")
    rows = writer(row_format(output, 3, (5, 7)))
    rows.write(1, sample())
    hwc = torch.from_numpy(rows.rows[1].copy())
    got = hwc.permute(2, 0, 1) if channels_last else hwc
    want = (torch.from_numpy(sample()).permute(2, 0, 1).double() / 255 - torch.tensor(output.mean).view(3, 1, 1)) \
        / torch.tensor(output.std).view(3, 1, 1)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), want, atol=1e-6 if dtype == torch.float32 else 2e-3, rtol=0)
    assert not rows.rows[0].any() and not rows.rows[2].any()   # no other row touched


@pytest.mark.parametrize("channels_last", [True, False])
def test_uint8_output_is_the_sample_in_the_outputs_layout(channels_last):
    output = OutputSpec(mean=None, std=None, dtype=torch.uint8, channels_last=channels_last, device="cpu")
    fmt = row_format(output, 2, (5, 7))
    assert fmt.in_place == channels_last
    rows = writer(fmt)
    out = rows.buffer(1)
    out[:] = sample()
    rows.write(1, out)
    got = rows.rows[1] if channels_last else rows.rows[1].transpose(1, 2, 0)
    assert np.array_equal(got, sample()) and not rows.rows[0].any()


def test_pixels_are_decoded_in_place_and_a_transformed_sample_copied_there():
    fmt = RowFormat(2, (5, 7))
    rows = writer(fmt)
    out = rows.buffer(0)
    assert np.shares_memory(out, rows.rows) and out.shape == (5, 7, 3)
    out[:] = sample()
    rows.write(0, 255 - out)   # a transform that returned a new array
    assert np.array_equal(rows.rows[0], 255 - sample()) and not rows.rows[1].any()


def test_a_dtype_numpy_lacks_gets_uint8_pixels_for_the_finisher():
    fmt = row_format(OutputSpec(dtype=torch.bfloat16, device="cpu"), 2, (5, 7))
    assert fmt == RowFormat(2, (5, 7)) and fmt.in_place
