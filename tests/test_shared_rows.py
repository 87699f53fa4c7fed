"""A worker's rows: what RowWriter writes equals what the thread engine's HostNormalizer writes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from feedline.config import OutputSpec
from feedline.sources.normalization import HostNormalizer, normalize_table
from feedline.sources.shared_rows import Arena, RowFormat, RowWriter, attach


@pytest.mark.parametrize("dtype,channels_last", [(torch.float32, True), (torch.float32, False),
                                                  (torch.float16, True), (torch.uint8, False)])
def test_a_written_row_is_the_host_normalizers(dtype, channels_last):
    mean = None if dtype == torch.uint8 else (0.4, 0.5, 0.6)
    output = OutputSpec(mean=mean, std=None if mean is None else (0.2, 0.25, 0.3), dtype=dtype,
                        channels_last=channels_last, device="cpu")
    fmt = RowFormat(3, (5, 7), str(dtype).removeprefix("torch."), channels_last,
                    normalize_table(output.mean, output.std) if mean else None)
    arena = Arena(fmt.nbytes)
    writer = RowWriter(fmt, arena.memory)
    sample = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    writer.write(1, sample)
    expected = torch.zeros((5, 7, 3), dtype=dtype).permute(2, 0, 1) if channels_last else \
        torch.zeros((3, 5, 7), dtype=dtype)
    HostNormalizer(output)(sample, expected)
    rows = torch.from_numpy(writer.rows[1].copy())
    got = rows.permute(2, 0, 1) if channels_last else rows
    assert torch.equal(got, expected)
    assert not writer.rows[0].any() and not writer.rows[2].any()   # no other row touched


def test_pixels_are_decoded_in_place_and_a_second_mapping_sees_them():
    fmt = RowFormat(2, (4, 4))
    assert fmt.in_place and fmt.shape == (2, 4, 4, 3)
    arena = Arena(fmt.nbytes)
    import os
    other = RowWriter(fmt, attach(os.dup(arena.fd), fmt.nbytes))   # as a worker maps it
    arena.release_fd()
    mine = RowWriter(fmt, arena.memory)
    row = other.buffer(1, False)
    row[:] = 200
    other.write(1, row)
    assert (mine.rows[1] == 200).all() and not mine.rows[0].any()
