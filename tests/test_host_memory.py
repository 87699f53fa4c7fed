"""sources/host_memory.py: the memory a process can still take, its cgroup's limit included."""
from __future__ import annotations

from feedline.sources import host_memory


def test_a_cgroup_limit_counts_its_page_cache_as_free(monkeypatch):
    files = {"/proc/meminfo": "MemTotal: 100 kB\nMemAvailable:   4000 kB\n",
             "/sys/fs/cgroup/memory.max": "3000000\n", "/sys/fs/cgroup/memory.current": "2500000\n",
             "/sys/fs/cgroup/memory.stat": "anon 1000\ninactive_file 1000000\n"}
    monkeypatch.setattr(host_memory, "_read", files.get)
    assert host_memory.available_host_bytes() == 3000000 - 2500000 + 1000000
    files["/sys/fs/cgroup/memory.max"] = "max\n"
    assert host_memory.available_host_bytes() == 4000 * 1024
    files.clear()
    assert host_memory.available_host_bytes() is None
