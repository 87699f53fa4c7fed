"""stores/lmdb_environment.py: one environment per file per process, shared by the stores on it;
a forked child begins its own transactions, never closes or frees what it inherited, and never
hangs, however many forks are taken while threads of the parent read."""
from __future__ import annotations

import gc
import os

import lmdb
import pytest
from process_helpers import fork_storm, in_child
from store_helpers import photos, records  # noqa: F401 (fixtures)
from storefiles import write_lmdb
from test_lmdb_store import page_size

from feedline import StoreError
from feedline.stores import lmdb_environment
from feedline.stores.lmdb_store import LmdbStore


def test_stores_on_one_file_share_one_environment_released_by_the_last_close(tmp_path, photos):
    path = write_lmdb(tmp_path / "s.lmdb", photos)

    def work() -> bytes:
        first, second = LmdbStore(path), LmdbStore(path)
        view = second.read(3)
        first.close()   # second's buffers stay valid: the environment is still in use
        ok = bytes(view) == photos.images[3] and bytes(second.read(4)) == photos.images[4]
        second.close()
        lmdb.open(path, subdir=False, readonly=True, lock=False).close()   # released: py-lmdb opens it again
        return b"ok" if ok else b"wrong bytes"

    assert in_child(work) == (0, b"ok")
    store = LmdbStore(path)
    with pytest.raises(lmdb.Error, match="already open"):
        lmdb.open(path, subdir=False, readonly=True, lock=False)
    store.close()
    lmdb.open(path, subdir=False, readonly=True, lock=False).close()
    st = os.stat(path)
    assert (st.st_dev, st.st_ino) not in lmdb_environment._files.get().shared   # nothing kept for a file no store reads


def test_a_forked_child_reads_through_its_own_transactions_and_opens_new_files_itself(tmp_path, records):
    """py-lmdb refuses a second open of a file in one process, and the fork copies that list:
    the child begins its own transactions on the environment it inherited (a read-only map),
    and opens a file the parent did not have open as any process does."""
    path, other = write_lmdb(tmp_path / "f.lmdb", records), write_lmdb(tmp_path / "g.lmdb", records)
    with LmdbStore(path) as store:
        assert bytes(store.read(1)) == records.images[1]
        parent_txn = store._reader.get().txn()

        def work() -> bytes:
            ok = bytes(store.read(2)) == records.images[2]
            reader = store._reader.get()
            with LmdbStore(other) as second:
                fresh = not second._reader.get().share.inherited and bytes(second.read(3)) == records.images[3]
            return b"ok" if ok and fresh and reader.share.inherited and reader.txn() is not parent_txn else b"no"

        assert in_child(work) == (0, b"ok")
        assert bytes(store.read(3)) == records.images[3]


def test_a_forked_child_closing_or_dropping_the_store_leaves_what_it_inherited_alone(tmp_path, records):
    """The child closes only what it opened: the parent's environment and its transactions,
    copied by the fork, stay open there (closing them would wait on reads of threads the
    child does not have), so a record the parent read before the fork still reads right."""
    path = write_lmdb(tmp_path / "k.lmdb", records)
    store = LmdbStore(path)
    before_fork = store.read(1)
    parent_env = store._environment()

    def work() -> bytes:
        nonlocal store
        assert bytes(store.read(2)) == records.images[2]
        store.close()
        store = None   # the store itself freed in the child
        gc.collect()
        parent_env.stat()   # raises once the environment is closed
        return b"ok" if bytes(before_fork) == records.images[1] else b"wrong bytes"

    assert in_child(work) == (0, b"ok")
    assert bytes(store.read(3)) == records.images[3]
    store.close()


def test_a_forked_child_that_cannot_reopen_the_file_says_so_at_each_read(tmp_path, records):
    path = write_lmdb(tmp_path / "c.lmdb", records)
    cut = 3 * page_size(path)
    store = LmdbStore(path)
    assert bytes(store.read(0)) == records.images[0]
    os.truncate(path, cut)   # the parent reads no more

    def work() -> bytes:
        messages = []
        for _ in range(2):
            try:
                store.read(1)
            except StoreError as exc:
                messages.append(str(exc))
        return "\n".join(messages).encode()

    code, out = in_child(work)
    store.close()
    assert code == 0
    assert [m.split(" (")[0] for m in out.decode().split("\n")] == [f"{path}: the file is truncated"] * 2


@pytest.mark.slow
def test_a_thousand_forks_taken_while_threads_read_never_hang_a_child(tmp_path, records):
    """A child forked while other threads were inside reads (or opening the file) reads through
    transactions of its own; it never closes what it inherited, where LMDB would wait for reads
    that never end in the child."""
    path = write_lmdb(tmp_path / "busy.lmdb", records)
    assert fork_storm(path, 1000) == {"forked": 1000, "hung": 0, "wrong": 0, "failed": 0, "problems": []}
