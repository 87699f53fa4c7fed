"""The host finisher's fresh batches ask Linux for huge pages over every whole 2 MiB page they
cover, read back from /proc/self/smaps."""
from __future__ import annotations

from feedline import FeedLoader


HUGE_PAGE = 2 << 20


def vm_flags(address: int) -> tuple[int, int, set[str]]:
    """(start, end, VmFlags) of this process's memory mapping that holds ``address``."""
    span = None
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                span = (lo, hi) if lo <= address < hi else None
            elif line.startswith("VmFlags:") and span is not None:
                return span[0], span[1], set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


def test_fresh_host_batches_ask_for_huge_pages(packed_lmdb):
    """Each batch the host finisher allocates is advised MADV_HUGEPAGE over every whole
    2 MiB page it covers (the kernel marks such a mapping 'hg'), and over nothing else."""
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=224, num_threads=2, device="cpu", decoder="opencv")
    batches = [x for x, _ in loader]
    assert len(batches) == 6
    for x in batches:
        begin, size = x.data_ptr(), x.untyped_storage().nbytes()
        first = -(-begin // HUGE_PAGE) * HUGE_PAGE
        last = (begin + size) // HUGE_PAGE * HUGE_PAGE
        assert last - first >= HUGE_PAGE, "a 224 x 224 float batch of 8 covers whole huge pages"
        lo, hi, flags = vm_flags(first)
        assert "hg" in flags and lo <= first and last <= hi, "the batch's whole huge pages are advised"
        if lo < first:   # the mapping was split at the advised range: what precedes it is not advised
            assert lo == first or "hg" not in vm_flags(first - 1)[2]
