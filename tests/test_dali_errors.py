"""The DALI source's failures: what stopping an epoch early reads and reports, what a failure
DALI reports but the CPU check cannot explain says, and which sizes a record of the wrong size
is reported with. Real stores (tests/storefiles.py), DALI's CPU pipeline, the real CPU decoders."""
from __future__ import annotations

import io
import logging

import cv2
import numpy as np
import pytest
from PIL import Image
from storefiles import make_records, write_lmdb

from feedline import FeedLoader
from feedline.decoders import get_decoder
from feedline.core.errors import DecodeError
from feedline.sources.dali_graph import dali_reason


pytestmark = pytest.mark.dali
NOT_A_JPEG = b"\xff\xd8\xff\xe0 this is not really a jpeg" * 10


def dali_loader(path, **kw) -> FeedLoader:
    kw = {"batch_size": 2, "size": 16, "shuffle": False, "num_workers": 1, **kw}
    return FeedLoader(path, device="cpu", engine="dali", **kw)


def test_closing_an_epoch_early_feeds_dali_no_further_batch(tmp_path):
    """After the first batch, DALI holds that batch and ``prefetch`` more; closing the
    iterator takes those and feeds nothing else, so a missing record in the next batch is
    never read: the ledger stays empty until an epoch reaches it."""
    records = make_records(16, 4)
    probe = dali_loader(write_lmdb(tmp_path / "probe.lmdb", records))
    first_unfed = 2 * (1 + probe.config.prefetch)   # first record of batch prefetch + 1
    probe.close()
    loader = dali_loader(write_lmdb(tmp_path / "missing.lmdb", records, skip=(first_unfed,)),
                         on_error="substitute")
    assert len(loader) == 8 > 1 + loader.config.prefetch + 1
    it = iter(loader)
    next(it)
    it.close()
    assert loader.stats.bad_records == []
    assert sum(len(y) for _, y in loader) == 16
    [row] = loader.stats.bad_records
    assert (row.index, row.batch, row.position, row.reason) == (first_unfed, first_unfed // 2, 0, "unreadable")
    loader.close()


def test_an_epoch_abandoned_while_dali_fails_a_batch_in_flight(tmp_path, caplog):
    """Batch 1 (in flight when the consumer stops after batch 0) holds a record that does
    not decode: closing raises nothing and reports nothing (that batch was never delivered),
    drops the failed pipeline saying so at debug level with DALI's error, and the next epoch
    builds a new one that finds the record and names it."""
    records = make_records(8, 2)
    records.images[3] = NOT_A_JPEG
    loader = dali_loader(write_lmdb(tmp_path / "garbage.lmdb", records))
    caplog.set_level(logging.DEBUG, logger="feedline.sources.dali")
    it = iter(loader)
    _, labels = next(it)
    assert labels.tolist() == [0, 1]
    it.close()
    assert loader.stats.bad_records == []
    [log] = [r for r in caplog.records if r.name == "feedline.sources.dali"]
    assert log.levelno == logging.DEBUG
    assert log.getMessage() == "dropping the DALI pipeline after an interrupted run"
    assert log.exc_info is not None and issubclass(log.exc_info[0], RuntimeError)
    with pytest.raises(DecodeError) as info:
        list(loader)
    assert info.value.index == 3 and info.value.path == records.paths[3]
    [row] = loader.stats.bad_records
    assert (row.index, row.batch, row.position, row.substitute) == (3, 1, 1, None)
    loader.close()


def as_gif(jpeg: bytes) -> bytes:
    """The same picture as a GIF: the CPU decoders read it, DALI's image decoder does not."""
    rgb = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "GIF")
    return out.getvalue()


@pytest.mark.parametrize("gif,failed_batch", [(11, 2), (5, 1)])
def test_a_failure_the_cpu_check_cannot_explain_names_the_batch_and_dalis_reason(tmp_path, gif, failed_batch):
    """A record DALI cannot decode but the CPU decodes to the size the store records (a GIF)
    fails the batch DALI reported (the last batch, alone in flight, or a middle one with a
    later batch in flight) with DALI's own reason, in both error modes, blaming no record."""
    records = make_records(12, 3)
    records.images[gif] = as_gif(records.images[gif])
    assert get_decoder("auto").decode(records.images[gif]).shape[:2] == records.sizes[gif]
    path = write_lmdb(tmp_path / "gif.lmdb", records)
    for on_error in ("raise", "substitute"):
        loader = dali_loader(path, batch_size=4, on_error=on_error)
        loader.set_epoch(3)
        with pytest.raises(DecodeError) as info:
            list(loader)
        error, cause = info.value, info.value.__cause__
        assert isinstance(cause, RuntimeError)
        reason = dali_reason(cause)
        assert reason in str(cause) and reason != "None"
        assert str(error) == (f"DALI failed on batch {failed_batch} of epoch 3 ({reason}), but each of its "
                              "records decodes on the CPU to the size the store records")
        assert error.index is None and loader.stats.bad_records == []
        loader.close()


def test_a_record_smaller_than_the_store_says_is_substituted_naming_both_sizes(tmp_path):
    """The store records a size (neither square nor the real one's transpose) larger than the
    JPEG: DALI's crop falls outside the image, the CPU check names both sizes in the ledger,
    and the batch is delivered whole with a substitute."""
    records = make_records(6, 2)
    h, w = records.sizes[2]
    records.sizes[2] = (2 * h, 3 * w)
    loader = dali_loader(write_lmdb(tmp_path / "sizes.lmdb", records), batch_size=3, train=False,
                         on_error="substitute")
    assert [len(y) for _, y in loader] == [3, 3]
    [row] = loader.stats.bad_records
    assert (row.index, row.reason) == (2, "cannot decode") and row.substitute not in (None, 2)
    assert row.detail == f"decodes to {h}x{w}, but the store records {2 * h}x{3 * w}"
    loader.close()


@pytest.mark.dali
def test_dali_names_a_record_that_decodes_to_another_size_than_the_store_says(tmp_path):
    """DALI fails the batch (the crop lies outside the real image); the CPU check finds the
    record and says both sizes."""
    records = make_records(6, 2)
    h, w = records.sizes[2]
    records.sizes[2] = (2 * h, 2 * w)
    path = write_lmdb(tmp_path / "sizes.lmdb", records)
    loader = FeedLoader(path, batch_size=3, size=16, device="cpu", engine="dali", num_workers=1)
    with pytest.raises(Exception, match=rf"decodes to {h}x{w}, but the store records {2 * h}x{2 * w}") as info:
        list(loader)
    assert info.value.index == 2
    [record] = loader.stats.bad_records
    assert (record.index, record.substitute, record.reason) == (2, None, "cannot decode")
