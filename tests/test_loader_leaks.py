"""Nothing leaks and memory stays flat: threads and file descriptors back to their baseline
after 300 abandoned iterators, resident memory flat over 5 epochs (issue 13)."""
from __future__ import annotations

import gc
import os
import threading

from feedline import FeedLoader


def feedline_threads() -> int:
    return sum(t.name.startswith("feedline-") for t in threading.enumerate())


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_300_abandoned_iterators_leave_no_thread_or_descriptor(packed_lmdb):
    with FeedLoader(str(packed_lmdb), batch_size=4, size=32, num_workers=2, device="cpu", shuffle=True) as loader:
        next(iter(loader))  # opens the store and builds the decoder: part of the baseline
        gc.collect()
        threads, fds = feedline_threads(), open_fds()
        for k in range(300):
            it = iter(loader)
            next(it)
            if k % 2:
                del it          # dropped: finalized at once
            else:
                iter(loader)    # replaced by a new iteration, which closes it
        gc.collect()
        assert feedline_threads() == threads == 1   # the thread the workers were started from, idle
        assert open_fds() == fds


def test_resident_memory_is_flat_over_epochs(packed_lmdb):
    loader = FeedLoader(str(packed_lmdb), batch_size=8, size=96, num_workers=2, device="cpu", shuffle=True)
    rss = []
    for epoch in range(6):
        loader.set_epoch(epoch)
        for images, _ in loader:
            del images
        gc.collect()
        rss.append(rss_bytes())
    loader.close()
    # Epoch 0 allocates the ring, the decoders' state and the allocator's pools; after it,
    # nothing may grow with the epochs. Keeping each epoch's output (48 x 3 x 96 x 96 float32,
    # 5.3 MiB) would grow it by 26 MiB over epochs 1-5.
    assert max(rss[1:]) - rss[1] < 8 << 20, [r >> 20 for r in rss]


def test_a_program_ending_mid_epoch_exits_cleanly(packed_lmdb):
    """A loader left mid-epoch at the end of a program: its decode threads are stopped before
    the interpreter shuts down (native thread pools torn down under running threads can
    abort the process)."""
    import subprocess
    import sys
    code = ("import sys\nfrom feedline import FeedLoader\n"
            "loader = FeedLoader(sys.argv[1], batch_size=8, size=64, device='cpu', num_workers=2)\n"
            "it = iter(loader)\nnext(it)\nnext(it)\n")
    for _ in range(4):
        done = subprocess.run([sys.executable, "-c", code, str(packed_lmdb)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-500:]
