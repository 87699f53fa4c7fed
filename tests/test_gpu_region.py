"""When GPU region decode is unsafe (nvImageCodec 0.9), the GPU engine and DALI decode
whole images and crop: the rule, its override, the crop, and DALI's whole-image graph
(run here on DALI's CPU pipeline) giving the same pixels as its region graph."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from feedline.decoders.base import Box
from feedline.sources import gpu_region as region_decode
from feedline.sources.gpu_region import crop_on_device, region_decode_choice, region_decode_safe


@pytest.mark.parametrize("version, capability, choice, safe", [
    ("0.9.0.20", (9, 0), None, False),     # H100 / H200: SIGSEGV
    ("0.9.1", (10, 0), None, False),       # B200: SIGSEGV
    ("0.9.0.20", (8, 0), None, False),     # A100: internal error
    ("0.8.0.1422", (9, 0), None, True),    # the last good release
    ("0.10.0", (9, 0), None, True),
    ("0.9.0.20", (9, 0), True, True),      # forced on
    ("0.8.0", (9, 0), False, False),       # forced off (the GPU check's smoke saw a crash)
    (None, None, None, True),
])
def test_the_rule(version, capability, choice, safe):
    got, why = region_decode_safe(version, capability, choice)
    assert got is safe
    if choice is not None:
        assert why == f"region_decode={choice}"
    elif not safe:
        assert version in why and "#55" in why


def test_the_setting_the_cli_reads():
    assert [region_decode_choice(v) for v in (None, "auto", " AUTO ", "0", "1")] == [None, None, None, False, True]
    with pytest.raises(ValueError, match="FEEDLINE_GPU_REGION_DECODE='yes'"):
        region_decode_choice("yes")


def test_the_choice_is_logged_once(caplog):
    region_decode._log_choice.cache_clear()
    with caplog.at_level(logging.INFO, logger=region_decode.__name__):
        assert region_decode.gpu_region_decode(None, False) is False
        assert region_decode.gpu_region_decode(None, False) is False
    lines = [r for r in caplog.records if "region decode off" in r.getMessage()]
    assert len(lines) == 1


def test_crop_of_a_whole_image():
    whole = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)
    crop = crop_on_device(whole, Box(2, 3, 4, 5), torch.device("cpu"))
    assert crop.shape == (4, 5, 3)
    assert np.array_equal(crop.numpy(), whole[2:6, 3:8])
    assert crop_on_device(whole, Box(3, 3, 4, 5), torch.device("cpu")) is None   # past the bottom
    assert crop_on_device(None, Box(0, 0, 1, 1), torch.device("cpu")) is None


@pytest.mark.dali
def test_dali_whole_image_graph_gives_the_region_graphs_pixels(tmp_path):
    pytest.importorskip("nvidia.dali")
    from feedline.planning.augment import AugmentSpec
    from feedline.core.config import OutputSpec
    from feedline.sample import make_photo_folder
    from feedline.sources.dali_graph import PipelineSpec, build_pipeline, import_dali
    make_photo_folder(str(tmp_path / "photos"), n=4, classes=1, seed=5, sizes=[(160, 120), (200, 150)])
    files = sorted((tmp_path / "photos").rglob("*.jpg"))
    jpegs = [np.frombuffer(f.read_bytes(), dtype=np.uint8) for f in files]
    anchors = [np.array([10, 20], dtype=np.int32), np.array([0, 0], dtype=np.int32),
               np.array([33, 7], dtype=np.int32), np.array([50, 41], dtype=np.int32)]
    shapes = [np.array([90, 70], dtype=np.int32), np.array([64, 64], dtype=np.int32),
              np.array([61, 99], dtype=np.int32), np.array([40, 52], dtype=np.int32)]
    mirrors = [np.array(k % 2, dtype=np.int32) for k in range(4)]
    output = OutputSpec(device="cpu", mean=None, std=None, dtype=torch.uint8,
                        channels_last=True)   # HWC out of DALI (the CPU's default is NCHW)
    dali = import_dali()
    out = {}
    for region in (True, False):
        spec = PipelineSpec(4, 1, 2, output, (32, 48), region_decode=region)
        pipe = build_pipeline(dali, spec, lambda: (jpegs, anchors, shapes, mirrors))
        out[region] = np.array(pipe.run()[0].as_tensor())
        del pipe
    assert out[True].shape == out[False].shape == (4, 32, 48, 3)
    assert out[True].std() > 10                                    # real pictures, not a blank
    assert np.array_equal(out[True], out[False])                   # libjpeg-turbo: the very same pixels


def test_whole_images_are_cut_to_each_samples_crop_after_the_decode(photo_folder):
    """Where region decode is unsafe, the GPU engine's crop streams hand nvImageCodec whole
    records and cut each decoded image to its sample's box (a view); a sample whose stream
    failed, or a new batch, leaves nothing behind."""
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    from feedline.sources.gpu_region import WholeImages
    try:
        nv = load_nvimgcodec()
    except Exception as exc:  # noqa: BLE001 - no nvImageCodec here
        pytest.skip(f"needs nvImageCodec: {exc}")
    data = sorted(photo_folder.rglob("*.jpg"))[0].read_bytes()
    whole = torch.arange(10 * 12 * 3, dtype=torch.uint8).reshape(10, 12, 3)
    streams = WholeImages(nv, "cpu")
    streams.stream(0, data, Box(1, 2, 3, 4))
    streams.stream(2, data, Box(0, 0, 20, 20))   # larger than what was decoded: the CPU decides
    got = streams.crops([whole, "substitute", whole])
    assert torch.equal(got[0], whole[1:4, 2:6]) and got[1] == "substitute" and got[2] is None
    streams.stream(0, data, Box(0, 0, 1, 1))
    streams.begin()
    assert streams.crops([whole])[0] is whole
