"""sources/known_bad.py: the bad records a pipeline engine has found, remembered across
epochs (unless the rule raises), read again as a failure each time, and checked on the CPU
against the size the store records."""
from __future__ import annotations

import numpy as np
import pytest
from storefiles import make_records, write_lmdb

from feedline import open_dataset
from feedline.planning.augment import AugmentSpec
from feedline.core.choices import OnError, Order
from feedline.core.errors import DecodeError
from feedline.core.ledger import BadRecordLedger
from feedline.planning.plan import EpochPlan
from feedline.sources.known_bad import KnownBad
from feedline.sources.policy import BadRecordPolicy


def policy(store, on_error):
    epoch = EpochPlan(AugmentSpec(size=(16, 16)), seed=0, epoch=0, order=Order.SEQUENTIAL, batch_size=4,
                      drop_last=False)
    return BadRecordPolicy(store, on_error, epoch, BadRecordLedger())


@pytest.fixture
def store(tmp_path):
    records = make_records(6, 2)
    records.images[3] = b"\xff\xd8\xff\xe0 not really a jpeg" * 8
    return open_dataset(write_lmdb(tmp_path / "bad.lmdb", records))


def test_a_good_record_is_read_as_bytes_and_checks_clean(store):
    known = KnownBad(store)
    assert bytes(known.read(0, policy(store, OnError.SUBSTITUTE))) == bytes(store.read(0))
    assert known.check(0) is None and 0 not in known


def test_a_found_bad_record_is_remembered_and_raised_each_time(store):
    known = KnownBad(store)
    why = known.check(3)
    assert why is not None
    known.found(3, why, policy(store, OnError.SUBSTITUTE))
    assert 3 in known
    for _ in range(2):
        with pytest.raises(type(why)):
            known.read(3, policy(store, OnError.SUBSTITUTE))


def test_nothing_is_remembered_when_the_rule_raises(store):
    known = KnownBad(store)
    known.found(3, DecodeError("bad"), policy(store, OnError.RAISE))
    assert 3 not in known


def test_a_record_that_decodes_to_another_size_than_recorded_is_bad(store, monkeypatch):
    monkeypatch.setattr(store, "size", lambda i: (1, 1))
    why = KnownBad(store).check(0)
    assert isinstance(why, DecodeError) and "but the store records 1x1" in str(why)
    assert np.asarray(store.sizes).shape[1] == 2
