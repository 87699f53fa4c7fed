"""sources/dali_graph.py: DALI's error reports cut to their informative line, the dtype DALI
writes for each output dtype, and where the pipeline decodes. (The pipeline's batches are
checked against the other engines in test_dali.py.)"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from feedline.core.config import OutputSpec
from feedline.sources.dali_graph import PipelineSpec, dali_dtype, dali_reason


def test_a_dali_error_is_cut_to_its_informative_line():
    report = ("Critical error in pipeline:\nError in thread 0: [/opt/dali/decoder.cc:42] Unsupported image type.\n"
              "Current pipeline object is no longer valid.\nC++ context: [/opt/dali/pipeline.cc:9]\n\n")
    assert dali_reason(RuntimeError(report)) == "Error in thread 0: [/opt/dali/decoder.cc:42] Unsupported image type."
    assert dali_reason(RuntimeError("")) == "RuntimeError('')"


def test_dali_writes_float32_where_it_has_no_type_of_the_output():
    types = SimpleNamespace(UINT8="u8", FLOAT16="f16", FLOAT="f32")
    assert [dali_dtype(types, d) for d in (torch.uint8, torch.float16, torch.bfloat16, torch.float32)] == \
        ["u8", "f16", "f32", "f32"]


def test_the_pipeline_decodes_on_the_cpu_off_cuda():
    assert PipelineSpec(4, 1, 2, OutputSpec(device="cpu"), (32, 32)).device_id is None
