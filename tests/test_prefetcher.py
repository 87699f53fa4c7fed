"""The host finisher and the GPU prefetcher's conversion agree; the GPU tests run where CUDA is."""
import numpy as np
import pytest
import torch

from feedline import FeedLoader
from feedline.pipeline.plan import OutputSpec
from feedline.pipeline.prefetcher import CpuFinisher, _normalizer, convert


def random_batch(n=4, h=20, w=24, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels_last", [True, False])
def test_host_per_sample_conversion_equals_the_gpu_batch_conversion(dtype, channels_last):
    """convert() is what the CUDA prefetcher runs on the device; run here on the host, it
    must give what the decode threads' per-sample lookup table gives."""
    batch = random_batch()
    output = OutputSpec(dtype=dtype, channels_last=channels_last)
    finisher = CpuFinisher(output, (20, 24))
    host = finisher.new_batch(len(batch))
    for j in range(len(batch)):
        finisher.convert_sample(batch[j], host, j)
    device_style = convert(torch.from_numpy(batch), output, _normalizer(output, "cpu"))
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


def test_uint8_output_is_a_copy_in_nchw_order():
    batch = random_batch()
    output = OutputSpec(mean=None, std=None, dtype=torch.uint8)
    finisher = CpuFinisher(output, (20, 24))
    host = finisher.new_batch(len(batch))
    for j in range(len(batch)):
        finisher.convert_sample(batch[j], host, j)
    assert torch.equal(host, torch.from_numpy(batch).permute(0, 3, 1, 2))
    device_style = convert(torch.from_numpy(batch), output, None)
    assert torch.equal(device_style, host)
    assert device_style.data_ptr() != torch.from_numpy(batch).data_ptr()


@pytest.mark.cuda
def test_gpu_batches_equal_cpu_batches(packed_lmdb):
    kwargs = dict(batch_size=8, shuffle=True, size=64, num_threads=2, decoder="turbojpeg", seed=4)
    cpu = [(x, y) for x, y in FeedLoader(str(packed_lmdb), device="cpu", **kwargs)]
    gpu_loader = FeedLoader(str(packed_lmdb), device="cuda", **kwargs)
    gpu = [(x.cpu(), y.cpu()) for x, y in gpu_loader]
    assert len(gpu) == len(cpu)
    for (x, y), (gx, gy) in zip(cpu, gpu):
        assert torch.equal(y, gy)
        assert torch.allclose(x, gx, atol=1e-5)
    x, _ = next(iter(gpu_loader))
    assert x.is_cuda and x.is_contiguous(memory_format=torch.channels_last)
    assert gpu_loader._ring.images.is_pinned()
    gpu_loader.close()


@pytest.mark.cuda
def test_gpu_batches_survive_the_consumer_stream_reusing_memory(packed_lmdb):
    """Batches made on the side stream stay intact while the consumer keeps allocating."""
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=64, num_threads=2, device="cuda",
                        decoder="turbojpeg", prefetch=1)
    kept = []
    for x, y in loader:
        kept.append((x.sum().item(), x))
        torch.randn(4096, 4096, device="cuda").sum()  # churn the allocator on the consumer stream
    torch.cuda.synchronize()
    for total, x in kept:
        assert x.sum().item() == pytest.approx(total, rel=1e-6)
