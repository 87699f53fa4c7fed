"""How much memory this process can still take, for the check that the batch buffers fit
before they are allocated (ring.py)."""
from __future__ import annotations


def available_host_bytes() -> int | None:
    """Memory this process can still take: MemAvailable, capped by its cgroup's limit less
    the cgroup's working set (its usage but the page cache it would give back first)."""
    found = []
    meminfo = _read("/proc/meminfo")
    for line in (meminfo or "").splitlines():
        if line.startswith("MemAvailable:"):
            found.append(int(line.split()[1]) * 1024)
    limit, used = _read("/sys/fs/cgroup/memory.max"), _read("/sys/fs/cgroup/memory.current")
    if limit and used and limit.strip().isdigit():
        stat = dict(line.split() for line in (_read("/sys/fs/cgroup/memory.stat") or "").splitlines()
                    if len(line.split()) == 2)
        found.append(int(limit) - int(used) + int(stat.get("inactive_file", 0)))
    return min(found) if found else None


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
