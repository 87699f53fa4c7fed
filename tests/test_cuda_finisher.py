"""The CUDA Finisher (feedline/sources/cuda_finisher.py): on a GPU each of its three
synchronizations is needed (its normalization is checked against the host's in
test_normalization.py).

Each GPU test holds one stream back with a spin kernel (torch.cuda._sleep, tens of
milliseconds) so that the hazard its synchronization guards against happens for sure
when the synchronization is missing, not by luck of timing:

- ``ready`` / wait_event: the side stream is held back; a consumer that did not wait
  reads the batch's memory before the copy has written it.
- record_stream: the consumer's stream is held back and the batch is dropped while the
  consumer still has to read it; without record_stream the allocator gives that memory
  to the next batch, which the idle side stream writes at once.
- ``copied``: the side stream is held back; a pinned slot handed back to the decode
  threads before its copy ran is refilled with a later batch, which the copy then sends.

Each also runs against a finisher with that one synchronization taken out and checks
that the scenario does catch it: the test proves its own sensitivity on the GPU. Each
scenario runs once untimed first, so that the caching allocator already holds the blocks
it needs: a cudaMalloc between two commands may order the streams and hide the hazard.
Every batch differs from its neighbours at every image position (real photos, rotated),
and is checked image by image against values computed on the CPU.
"""
from __future__ import annotations

import dataclasses

import cv2
import numpy as np
import pytest
import torch

from feedline import FeedLoader
from feedline.core.config import OutputSpec
from feedline.decoders import get_decoder
from feedline.planning.plan import BatchPlan
from feedline.sources.cuda_finisher import CudaFinisher
from feedline.sources.finisher import Finished
from feedline.sources.slot import Slot
from cuda_helpers import hold
from test_normalization import convert

BATCH, SIZE = 256, 224          # one training batch: 38.5 MB of uint8, 154 MB as float32 on the GPU
HOLD_MS = 60                    # how long a held-back stream lags: far above any copy or kernel here


# -- on a GPU -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def large_batches(photo_folder):
    """Four pinned uint8 batches of 256 real photos at 224 x 224; batch k holds photo
    (7k + j) % 48 at position j, so neighbouring batches differ at every position."""
    photos = [cv2.resize(cv2.imread(str(p))[:, :, ::-1], (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
              for p in sorted(photo_folder.rglob("*.jpg"))]
    batches = []
    for k in range(4):
        images = np.stack([photos[(7 * k + j) % len(photos)] for j in range(BATCH)])
        labels = torch.arange(BATCH, dtype=torch.int64) + 1000 * k
        batches.append((torch.from_numpy(images).pin_memory(), labels.pin_memory()))
    return batches


def expected_sums(images: torch.Tensor, output: OutputSpec) -> torch.Tensor:
    """Per-image sums of the converted batch, computed on the CPU."""
    return convert(images, output).double().sum(dim=(1, 2, 3))


def mismatches(got: list[tuple[torch.Tensor, torch.Tensor]], batches, output: OutputSpec) -> int:
    """How many images (and label sums) differ from the CPU's values, over all batches."""
    torch.cuda.synchronize()
    bad = 0
    for (sums, label_sum), (images, labels) in zip(got, batches, strict=True):
        want = expected_sums(images, output)
        bad += int((~torch.isclose(sums.cpu(), want, rtol=1e-6, atol=1e-2)).sum())
        bad += int(label_sum.item() != int(labels.sum()))
    return bad


class NoWait(CudaFinisher):
    """hand_over() without the consumer's wait on ``ready``."""

    def hand_over(self, finished: Finished):
        current = torch.cuda.current_stream(self.device)
        finished.images.record_stream(current)
        finished.targets.record_stream(current)
        return finished.images, finished.targets


class NoRecordStream(CudaFinisher):
    """hand_over() without record_stream on the consumer's stream."""

    def hand_over(self, finished: Finished):
        torch.cuda.current_stream(self.device).wait_event(finished.ready)
        return finished.images, finished.targets


class ReleasesSlotsEarly(CudaFinisher):
    """finish() whose ``copied`` event has already happened: the Slot goes back to the
    decode threads without waiting for its host-to-device copy."""

    def finish(self, slot):
        finished = super().finish(slot)
        idle = torch.cuda.Stream(device=self.device)
        copied = torch.cuda.Event()
        copied.record(idle)  # nothing queued there: complete at once
        return dataclasses.replace(finished, copied=copied)


def slot_of(images: torch.Tensor, labels: torch.Tensor) -> Slot:
    """A filled Slot holding a pinned uint8 N x H x W x 3 batch and its labels."""
    n = len(labels)
    plan = BatchPlan(0, 0, np.arange(n), np.zeros((n, 4), np.int64), np.zeros(n, bool), labels.numpy())
    return Slot(0, images, labels, None, tuple(images.shape[1:3]), plan=plan)


def read_while_side_stream_lags(finisher: CudaFinisher, batches) -> list:
    """The side stream is held back before each copy; the consumer reads each batch as
    soon as hand_over() hands it over."""
    got = []
    for images, labels in batches:
        hold(HOLD_MS, finisher.stream)
        out, out_labels = finisher.hand_over(finisher.finish(slot_of(images, labels)))
        got.append((out.double().sum(dim=(1, 2, 3)), out_labels.sum()))
    return got


def read_late_after_dropping(finisher: CudaFinisher, batches) -> list:
    """The consumer's stream is held back, its reads of batch k are queued behind that,
    and batch k is dropped before the next one is finished on the idle side stream."""
    got = []
    for images, labels in batches:
        out, out_labels = finisher.hand_over(finisher.finish(slot_of(images, labels)))
        hold(HOLD_MS)
        got.append((out.double().sum(dim=(1, 2, 3)), out_labels.sum()))
        del out, out_labels   # only the queued reads still need the memory
    return got


def run_warm(scenario, finisher: CudaFinisher, batches) -> list:
    """``scenario`` once to fill the allocator's cache for this finisher's stream, then for real."""
    scenario(finisher, batches)
    torch.cuda.synchronize()
    return scenario(finisher, batches)


@pytest.mark.cuda
def test_consumer_waits_for_the_copy_and_normalization(large_batches):
    output = OutputSpec(device="cuda")
    got = run_warm(read_while_side_stream_lags, CudaFinisher(output), large_batches)
    assert mismatches(got, large_batches, output) == 0


@pytest.mark.cuda
def test_without_the_wait_the_consumer_reads_unwritten_memory(large_batches):
    """The scenario above catches a missing wait_event."""
    output = OutputSpec(device="cuda")
    got = run_warm(read_while_side_stream_lags, NoWait(output), large_batches)
    assert mismatches(got, large_batches, output) > 0


@pytest.mark.cuda
def test_a_dropped_batch_stays_intact_until_the_consumer_has_read_it(large_batches):
    output = OutputSpec(device="cuda")
    got = run_warm(read_late_after_dropping, CudaFinisher(output), large_batches)
    assert mismatches(got, large_batches, output) == 0


@pytest.mark.cuda
def test_without_record_stream_the_next_batch_overwrites_a_dropped_one(large_batches):
    """The scenario above catches a missing record_stream: the allocator hands the dropped
    batch's memory to the next batch, written while the consumer's reads still wait."""
    output = OutputSpec(device="cuda")
    got = run_warm(read_late_after_dropping, NoRecordStream(output), large_batches)
    assert mismatches(got, large_batches, output) > 0


def cpu_decoder() -> str:
    """The decode threads' default decoder; "auto" on CUDA would pick DALI where it is installed."""
    return get_decoder("auto").name


def loader_vs_cpu(packed_lmdb, finisher_cls=None) -> int:
    """Batches of epoch 1 through FeedLoader on CUDA with the side stream held back before
    every batch and the consumer's stream busy, against the same batches on the CPU: how
    many batches differ. Eight decode threads and a ring of three slots refill a released
    slot at once. Epoch 0 runs first, untimed, to fill the allocator's cache."""
    kwargs = dict(batch_size=8, shuffle=True, size=64, num_workers=8, seed=11, prefetch=1, decoder=cpu_decoder())
    cpu_loader = FeedLoader(str(packed_lmdb), device="cpu", **kwargs)
    cpu_loader.set_epoch(1)
    cpu = [x for x, _ in cpu_loader]
    loader = FeedLoader(str(packed_lmdb), device="cuda", **kwargs)
    if finisher_cls is not None:
        loader.source.finisher = finisher_cls(loader.config.output)
    side = loader.source.finisher.stream
    warm = [x for x, _ in loader]     # epoch 0
    torch.cuda.synchronize()
    del warm
    loader.set_epoch(1)
    gpu, batches = [], iter(loader)
    while True:
        hold(HOLD_MS, side)           # every copy submitted in this next() starts late
        try:
            x, _ = next(batches)
        except StopIteration:
            break
        hold(HOLD_MS / 4)             # a training step on the consumer's stream
        gpu.append(x)                 # kept on the GPU: a copy to the host now would wait for it
    torch.cuda.synchronize()
    loader.close()
    assert len(gpu) == len(cpu) == 6
    return sum(not torch.allclose(a, b.cpu(), atol=1e-5) for a, b in zip(cpu, gpu, strict=True))


@pytest.mark.cuda
def test_slots_go_back_to_the_decode_threads_only_after_their_copy(packed_lmdb):
    assert loader_vs_cpu(packed_lmdb) == 0


@pytest.mark.cuda
def test_without_the_copied_event_a_refilled_slot_corrupts_its_batch(packed_lmdb):
    """The scenario above catches slots released before their copy."""
    assert loader_vs_cpu(packed_lmdb, ReleasesSlotsEarly) > 0


@pytest.mark.cuda
def test_gpu_batches_equal_cpu_batches(packed_lmdb):
    kwargs = dict(batch_size=8, shuffle=True, size=64, num_workers=2, seed=4, decoder=cpu_decoder())
    cpu = [(x, y) for x, y in FeedLoader(str(packed_lmdb), device="cpu", **kwargs)]
    gpu_loader = FeedLoader(str(packed_lmdb), device="cuda", **kwargs)
    gpu = [(x.cpu(), y.cpu()) for x, y in gpu_loader]
    assert len(gpu) == len(cpu) == 6
    for (x, y), (gx, gy) in zip(cpu, gpu, strict=True):
        assert torch.equal(y, gy)
        assert torch.allclose(x, gx, atol=1e-5)
    x, _ = next(iter(gpu_loader))
    assert x.is_cuda and x.is_contiguous(memory_format=torch.channels_last)
    assert gpu_loader.source.ring.slot(0).images.is_pinned()
    gpu_loader.close()
