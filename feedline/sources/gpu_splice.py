"""What the GPU engine hands nvImageCodec for each sample's crop, chosen once for the store
(gpu_region.crop_streams) and given to the engine: a region of the record (RegionStreams), or,
on a grid store, the crop's MCUs spliced into a small JPEG (GridSplice). Each also names the CPU
decoder that stands in for a record the GPU cannot decode (``fallback``).

nvImageCodec's region request still Huffman-decodes the scan up to the region's end, and
the H100/H200 hardware JPEG decoder has no region decode at all. On a grid store
(`jpeg_grid`) a crop's MCUs make a valid JPEG by themselves, so the batched decode gets
only those bytes, on every backend alike; the decoded MCU block is then cut to the crop
(a view, no copy). A record that is not a valid grid is a bad record on this path too: its
stream is refused here, and the CPU fallback (the store's `grid_decoder_for`) refuses it
the same way.
"""
from __future__ import annotations

import numpy as np
import torch

from ..decoders.base import Box
from ..decoders.jpeg_grid import splice_crop


class RegionStreams:
    """The crop as a region of the record's code stream. Not thread-safe: one producer thread
    calls ``begin``, ``stream`` for a batch's samples, then ``crops`` once with the decoded batch."""

    def __init__(self, nv, fallback=None):
        self._nv, self.fallback = nv, fallback

    def begin(self) -> None:
        """A new batch."""

    def stream(self, k: int, data, box: Box):
        """The CodeStream of sample ``k``'s crop; an error when ``data`` is not a format nvImageCodec parses."""
        return self._nv.CodeStream(data).get_sub_code_stream(
            region=self._nv.Region(start=(box.top, box.left), end=(box.top + box.height, box.left + box.width)))

    def crops(self, images: list) -> list:
        """The decoded regions are the crops already."""
        return images


class GridSplice:
    """Spliced code streams for one batch, then the decoded blocks cut to their crops.

    Not thread-safe: one producer thread calls ``begin``, ``stream`` for a batch's samples,
    then ``crops`` once with the decoded batch."""

    def __init__(self, nv, device: torch.device | str = "cpu", fallback=None):
        self._nv, self._device, self.fallback = nv, torch.device(device), fallback
        self._cuts: dict[int, tuple[Box, tuple[int, int]]] = {}   # sample -> (crop in its block, block size)

    def begin(self) -> None:
        """A new batch: forget the crops of one whose decode failed before ``crops``."""
        self._cuts = {}

    def stream(self, k: int, data, box: Box):
        """The CodeStream of sample ``k``'s crop; DecodeError when ``data`` is not a grid."""
        spliced, shifted, size = splice_crop(data, box)
        self._cuts[k] = (shifted, size)
        return self._nv.CodeStream(spliced)

    def crops(self, images: list) -> list:
        """``images`` with each spliced sample's decoded block replaced by its crop (a torch
        view); None where the decoder returned nothing or a block of the wrong size, which
        sends that sample to the CPU fallback."""
        cuts, self._cuts = self._cuts, {}
        for k, (cut, size) in cuts.items():
            image = images[k]
            if image is None or isinstance(image, np.ndarray):
                continue
            block = image_tensor(image, self._device)
            if tuple(block.shape[:2]) != size:
                images[k] = None
                continue
            images[k] = block[cut.top:cut.top + cut.height, cut.left:cut.left + cut.width]
        return images


def image_tensor(image, device: torch.device) -> torch.Tensor:
    """An nvImageCodec image as an H x W x C uint8 tensor, without a copy; it keeps the image alive."""
    if "HOST" in str(getattr(image, "buffer_kind", "")):
        return torch.from_numpy(np.asarray(image))
    return torch.as_tensor(image, device=device)
