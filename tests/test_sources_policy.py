"""BadRecordPolicy, the one rule every engine applies to a bad record: raise it naming the
record, or deliver the first substitute of substitute.py's sequence the engine can make;
one ledger entry either way."""
from __future__ import annotations

import numpy as np
import pytest

from feedline import open_dataset
from feedline.planning.augment import AugmentSpec
from feedline.core.choices import OnError, Order
from feedline.core.errors import ChecksumError, DecodeError
from feedline.core.ledger import BadRecordLedger
from feedline.planning.plan import EpochPlan
from feedline.sources.policy import BadRecordPolicy
from feedline.sources.substitute import MAX_ATTEMPTS, substitute_sample

EPOCH = EpochPlan(AugmentSpec(size=(32, 32), train=True), seed=9, epoch=2, order=Order.RANDOM, batch_size=4, drop_last=False)


@pytest.fixture
def setting(packed_lmdb):
    with open_dataset(str(packed_lmdb)) as store:
        plan = next(EPOCH.batches(store.labels, store.sizes, start=1))
        yield store, plan


def policy_for(store, on_error) -> BadRecordPolicy:
    return BadRecordPolicy(store, on_error, EPOCH, BadRecordLedger())


def test_raise_names_the_record_and_keeps_the_cause(setting):
    store, plan = setting
    policy = policy_for(store, OnError.RAISE)
    index = int(plan.indices[2])
    why = ChecksumError("the bytes do not match their checksum", store.filename, index, store.path(index))
    tried = []
    with pytest.raises(DecodeError) as info:
        policy.replace(plan, 2, why, lambda *a: tried.append(a))
    assert tried == [] and info.value.__cause__ is why
    assert (info.value.index, info.value.path) == (index, store.path(index))
    assert str(info.value).startswith(f"record {index} ({store.path(index)}) of {store.filename}: checksum mismatch: ")
    [row] = policy.ledger.records()
    assert (row.epoch, row.batch, row.position, row.index, row.substitute) == (2, 1, 2, index, None)


def test_a_decode_error_that_already_names_the_record_is_raised_as_it_is(setting):
    store, plan = setting
    index = int(plan.indices[0])
    named = DecodeError("already says where", index=index, path=store.path(index))
    with pytest.raises(DecodeError) as info:
        policy_for(store, OnError.RAISE).fail(plan, 0, named)
    assert info.value is named and info.value.__cause__ is None


def test_substitute_delivers_the_first_substitute_the_engine_can_make(setting):
    """The engine cannot make the rule's first two substitutes: the third is delivered, with
    its own crop and flip, and the ledger names it."""
    store, plan = setting
    policy = policy_for(store, OnError.SUBSTITUTE)
    index = int(plan.indices[1])
    rule = [substitute_sample(EPOCH.spec, EPOCH.seed, EPOCH.epoch, index, n, store.sizes) for n in range(3)]
    tried = []

    def attempt(other, box, flip):
        tried.append((other, tuple(box), flip))
        if len(tried) < 3:
            raise OSError("cannot read this one either")
        return f"made {other}"

    assert policy.replace(plan, 1, ValueError("not a JPEG"), attempt) == f"made {rule[2][0]}"
    assert tried == [(o, tuple(b), f) for o, b, f in rule]
    [row] = policy.ledger.records()
    assert (row.index, row.position, row.substitute, row.reason) == (index, 1, rule[2][0], "cannot decode")


def test_substitute_gives_up_after_the_rules_attempts_and_raises(setting):
    store, plan = setting
    policy = policy_for(store, OnError.SUBSTITUTE)
    tried = []

    def attempt(other, box, flip):
        tried.append(other)
        raise OSError("bad too")

    with pytest.raises(DecodeError, match="on_error='substitute'") as info:
        policy.replace(plan, 3, ValueError("not a JPEG"), attempt)
    assert len(tried) == MAX_ATTEMPTS and info.value.index == int(plan.indices[3])
    assert [r.substitute for r in policy.ledger.records()] == [None]
    assert np.all(np.asarray(tried) != int(plan.indices[3]))
