"""feedline.memory: the batch buffers' size, and the memory a process can still take."""
from __future__ import annotations

import pytest

from feedline import memory
from feedline.augment import AugmentSpec
from feedline.config import LoaderConfig, OutputSpec


def test_the_estimate_counts_the_ring_and_the_delivered_batch():
    config = LoaderConfig(batch_size=8, prefetch=3, augment=AugmentSpec(size=(32, 40), train=True), output=OutputSpec(device="cpu"))
    pixels = 8 * 32 * 40 * 3
    assert memory.batch_pixels(config) == pixels
    assert memory.host_bytes(config) == 5 * pixels + 4 * pixels   # 5 uint8 ring slots, one float32 batch
    uint8 = LoaderConfig(batch_size=8, prefetch=3, augment=AugmentSpec(size=(32, 40), train=True),
                         output=OutputSpec(mean=None, device="cpu"))
    assert memory.host_bytes(uint8) == 6 * pixels and memory.device_bytes(uint8) == 0
    assert memory.host_bytes(LoaderConfig(engine="dali", decoder=None, output=OutputSpec(device="cpu"))) == 0


def test_a_cgroup_limit_counts_its_page_cache_as_free(monkeypatch):
    files = {"/proc/meminfo": "MemTotal: 100 kB\nMemAvailable:   4000 kB\n",
             "/sys/fs/cgroup/memory.max": "3000000\n", "/sys/fs/cgroup/memory.current": "2500000\n",
             "/sys/fs/cgroup/memory.stat": "anon 1000\ninactive_file 1000000\n"}
    monkeypatch.setattr(memory, "_read", files.get)
    assert memory.available_host_bytes() == 3000000 - 2500000 + 1000000
    files["/sys/fs/cgroup/memory.max"] = "max\n"
    assert memory.available_host_bytes() == 4000 * 1024
    files.clear()
    assert memory.available_host_bytes() is None


def test_a_batch_that_fits_is_not_refused(monkeypatch):
    config = LoaderConfig(batch_size=8, augment=AugmentSpec(size=32, train=True), output=OutputSpec(device="cpu"))
    monkeypatch.setattr(memory, "available_host_bytes", lambda: memory.host_bytes(config))
    memory.check_buffers_fit(config)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: memory.host_bytes(config) - 1)
    with pytest.raises(MemoryError, match=r"batch_size=8 at 32x32: the batch buffers need about 0\.0 GiB"):
        memory.check_buffers_fit(config)
