"""The bad-record ledger (feedline/core/ledger.py): one line per record, the one-line summary with
counts and the first few, and the last word per place in epoch order."""
from __future__ import annotations

from feedline.core.ledger import CHECKSUM, UNDECODABLE, BadRecord, BadRecordLedger


def bad(index, reason=UNDECODABLE, substitute=None, batch=0, position=None):
    return BadRecord(epoch=3, batch=batch, position=index if position is None else position, index=index,
                     path=f"a/{index}.jpg", reason=reason, detail="broken", substitute=substitute)


def test_a_bad_record_reads_as_where_why_and_what_replaced_it():
    assert str(bad(4, substitute=9)) == "record 4 (a/4.jpg): cannot decode, replaced by record 9"
    assert str(bad(4, CHECKSUM)) == "record 4 (a/4.jpg): checksum mismatch"
    assert str(bad(4, substitute=0)).endswith("replaced by record 0")


def test_the_ledger_summary_is_one_line_with_counts_and_the_first_few():
    ledger = BadRecordLedger()
    for i in range(7):
        ledger.add(bad(i, CHECKSUM if i < 2 else UNDECODABLE, substitute=i + 10))
    line = ledger.summary("data.lmdb")
    assert line.startswith("data.lmdb: epoch 3: 7 bad record(s) (5 cannot decode, 2 checksum mismatch): ")
    assert "; ".join(str(bad(i, CHECKSUM if i < 2 else UNDECODABLE, substitute=i + 10)) for i in range(5)) in line
    assert "record 5 " not in line and line.count("; and 2 more.") == 1
    assert line.endswith("Check the file with `feedline verify`; loader.stats.bad_records lists them all")
    assert "\n" not in line and ledger.substituted == 7 and len(ledger) == 7

    few = BadRecordLedger()
    few.add(bad(1, substitute=None))
    few.add(bad(2, substitute=5))
    assert few.summary("x.h5", shown=2) == (
        "x.h5: epoch 3: 2 bad record(s) (2 cannot decode): record 1 (a/1.jpg): cannot decode; "
        "record 2 (a/2.jpg): cannot decode, replaced by record 5. "
        "Check the file with `feedline verify`; loader.stats.bad_records lists them all")
    assert few.substituted == 1
    assert BadRecordLedger().summary("e.h5").startswith("e.h5: epoch ?: 0 bad record(s) ()")


def test_the_ledger_keeps_the_last_word_per_place_in_epoch_order():
    ledger = BadRecordLedger()
    ledger.add(bad(5, batch=1, position=0, substitute=None))
    ledger.add(bad(2, batch=0, position=3, substitute=7))
    ledger.add(bad(5, batch=1, position=0, substitute=8))   # the source redid it with a substitute
    assert [(r.index, r.substitute) for r in ledger.records()] == [(2, 7), (5, 8)]
    assert len(ledger) == 2 and ledger.substituted == 2
