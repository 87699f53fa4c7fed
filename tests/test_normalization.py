"""sources/normalization.py: the device function (normalize_batch, what the Finishers run)
equals the host's per-sample one (the lookup table the workers write rows with, or their
uint8 pixels normalized per batch for a dtype numpy lacks), and both equal
(x / 255 - mean) / std written out by hand."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from feedline.core.config import OutputSpec
from feedline.sources.arena import Arena
from feedline.sources.normalization import layout_of, normalize_batch
from feedline.sources.ring import row_format, writes_normalized
from feedline.sources.rows import RowWriter


def convert(images_nhwc: torch.Tensor, output: OutputSpec) -> torch.Tensor:
    """What the CUDA Finisher does to a uint8 NHWC batch it copied: the device function."""
    return normalize_batch(images_nhwc.permute(0, 3, 1, 2), output)


def host_rows(batch: np.ndarray, output: OutputSpec) -> torch.Tensor:
    """What a host consumer receives from the workers' rows, written sample by sample."""
    fmt = row_format(output, len(batch), batch.shape[1:3])
    rows = RowWriter(fmt, Arena(fmt.nbytes, shared=False).memory)
    for j in range(len(batch)):
        rows.write(j, batch[j])
    images = torch.from_numpy(rows.rows)
    images = images.permute(0, 3, 1, 2) if fmt.channels_last else images
    return images if writes_normalized(output) else normalize_batch(images, output)


def photo_batch(photo_folder, n=4, size=(20, 24)) -> np.ndarray:
    """n real photos from the test folder, resized to ``size``: uint8 N x H x W x 3."""
    paths = sorted(photo_folder.rglob("*.jpg"))[:n]
    return np.stack([cv2.resize(cv2.imread(str(p))[:, :, ::-1], size[::-1], interpolation=cv2.INTER_AREA)
                     for p in paths])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [True, False])
def test_host_per_sample_conversion_equals_the_gpu_batch_conversion(photo_folder, dtype, channels_last):
    """normalize_batch is what the CUDA Finisher runs on the device; run here on the host,
    it must give what the workers' per-sample lookup table gives, and both must be
    (x / 255 - mean) / std written out by hand."""
    batch = photo_batch(photo_folder)
    output = OutputSpec(dtype=dtype, channels_last=channels_last)
    host = host_rows(batch, output)
    device_style = convert(torch.from_numpy(batch), output)
    for x in (host, device_style):
        assert x.dtype == dtype and x.shape == (4, 3, 20, 24)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        assert x.is_contiguous(memory_format=fmt)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    assert torch.allclose(host.float(), device_style.float(), atol=tolerance, rtol=0)
    mean = torch.tensor(output.mean).view(1, 3, 1, 1)
    std = torch.tensor(output.std).view(1, 3, 1, 1)
    reference = (torch.from_numpy(batch).permute(0, 3, 1, 2).float() / 255 - mean) / std
    assert torch.allclose(host.float(), reference, atol=tolerance, rtol=0)


@pytest.mark.parametrize("channels_last", [True, False])
def test_uint8_output_is_a_copy_in_nchw_order(photo_folder, channels_last):
    batch = photo_batch(photo_folder)
    output = OutputSpec(mean=None, std=None, dtype=torch.uint8, channels_last=channels_last)
    host = host_rows(batch, output)
    assert torch.equal(host, torch.from_numpy(batch).permute(0, 3, 1, 2))
    device_style = convert(torch.from_numpy(batch), output)
    assert torch.equal(device_style, host)
    assert device_style.data_ptr() != torch.from_numpy(batch).data_ptr()
    assert device_style.is_contiguous(memory_format=layout_of(output))


@pytest.mark.parametrize("output", [OutputSpec(), OutputSpec(mean=None, std=None, dtype=torch.uint8),
                                    OutputSpec(dtype=torch.bfloat16, channels_last=False)])
def test_float_pixels_normalize_as_their_uint8_values(photo_folder, output):
    """The GPU decoder hands normalize_batch float pixels on the 0..255 scale (resized, so
    between levels): whole levels give exactly what the uint8 batch gives, and a value
    between two levels rounds to the nearer (uint8 output) or lies between (float output)."""
    pixels = torch.from_numpy(photo_batch(photo_folder)).permute(0, 3, 1, 2)
    want = normalize_batch(pixels, output)
    assert torch.equal(normalize_batch(pixels.float(), output), want)
    shifted = normalize_batch(pixels.float().clamp(max=254) + 0.25, output)
    if output.mean is None:
        assert torch.equal(shifted, pixels.clamp(max=254))
    else:
        below = normalize_batch(pixels.clamp(max=254), output).float()
        above = normalize_batch(pixels.clamp(max=254) + 1, output).float()
        assert bool(((shifted.float() >= below - 1e-2) & (shifted.float() <= above + 1e-2)).all())
        assert shifted.dtype == output.dtype
