"""sources/target_batches.py: a batch's targets beyond the label, made into a Slot by the
planner and a substitute, handed over as a tensor or a dict."""
from __future__ import annotations

import torch



def test_the_tensors_recorded_on_the_consumers_stream_are_those_a_batch_hook_returned():
    """A batch hook may return targets that are not a tensor or a dict (None, a list), or host
    tensors: the CUDA engines record on the consumer's stream the device tensors among them,
    and nothing else (record_stream does not exist for host tensors). The meta device stands
    in for CUDA."""
    from feedline.sources.target_batches import each_tensor
    a, b, host = torch.zeros(2, device="meta"), torch.ones(2, 3, device="meta"), torch.zeros(2)
    assert each_tensor(a) == [a] and each_tensor(None) == [] and each_tensor(host) == []
    got = each_tensor({"label": a, "boxes": b, "note": "x", "ids": host})
    assert len(got) == 2 and got[0] is a and got[1] is b
    got = each_tensor([a, None, host, b])
    assert len(got) == 2 and got[0] is a and got[1] is b


def test_a_label_only_store_gets_its_labels_and_no_targets(packed_lmdb):
    """A store whose only field is `label` has no TargetSpec: the planner writes nothing and
    the consumer gets the Slot's int64 labels, as always."""
    import numpy as np
    import torch
    from feedline import open_dataset
    from feedline.planning.plan import BatchPlan
    from feedline.sources.slot import Slot
    from feedline.sources.target_batches import batch_targets, plan_targets, substitute_targets, target_spec
    store = open_dataset(str(packed_lmdb))
    assert target_spec(store, 4, 0.25) is None
    slot = Slot(0, torch.zeros((4, 2, 2, 3), dtype=torch.uint8), torch.zeros(4, dtype=torch.int64), None, (2, 2),
                plan=BatchPlan(0, 0, np.arange(3), np.zeros((3, 4), np.int64), np.zeros(3, bool), np.arange(3)))
    plan_targets(None, slot)
    substitute_targets(None, slot, 0, 5, np.zeros(4), False)
    got = batch_targets(None, slot, 3)
    assert got.shape == (3,) and got.data_ptr() == slot.labels.data_ptr()
