"""FeedLoader under PyTorch Lightning, run the way its users run it: the loader's epoch is the
trainer's epoch (Lightning calls ``set_epoch`` on a loader's ``sampler`` at each epoch's start
and may call ``iter()`` more than once before the first batch; neither may move the loader
ahead); a validation loader beside the training one, ``trainer.validate``, a resume from a
mid-epoch checkpoint, and DDP with two real ranks (tests/lightning_rank.py)."""
from __future__ import annotations

import pytest
import torch

from feedline import FeedLoader

pl = pytest.importorskip("lightning.pytorch", reason="needs lightning (pip install lightning; in the test extra)")

KW = dict(batch_size=16, shuffle=True, train=True, size=16, device="cpu", decoder="opencv", num_workers=1, seed=5)


class Recorder(pl.LightningModule):
    """A one-layer model that keeps, per trainer epoch, the labels of every batch it saw, in
    training and in validation."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3 * 16 * 16, 4)
        self.seen: dict[int, list[list[int]]] = {}
        self.validated: list[list[list[int]]] = []   # one list of batches per validation run

    def training_step(self, batch, _):
        images, labels = batch
        self.seen.setdefault(self.current_epoch, []).append(labels.tolist())
        return torch.nn.functional.cross_entropy(self.layer(images.reshape(len(images), -1)), labels)

    def on_validation_epoch_start(self):
        self.validated.append([])

    def validation_step(self, batch, _):
        images, labels = batch
        self.validated[-1].append(labels.tolist())
        accuracy = (self.layer(images.reshape(len(images), -1)).argmax(1) == labels).float().mean()
        self.log("val_acc", accuracy, batch_size=len(labels))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def epoch_labels(path, epoch: int) -> list[list[int]]:
    with FeedLoader(str(path), **KW) as loader:
        loader.set_epoch(epoch)
        return [labels.tolist() for _, labels in loader]


def test_lightning_epochs_read_the_loaders_epochs_of_the_same_number(packed_lmdb, tmp_path):
    model = Recorder()
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    with FeedLoader(str(packed_lmdb), **KW) as loader:
        trainer.fit(model, train_dataloaders=loader)
    assert sorted(model.seen) == [0, 1, 2]
    epochs = {e: epoch_labels(packed_lmdb, e) for e in range(4)}
    assert epochs[0] != epochs[1]   # the epochs differ, so a shifted epoch would show
    for e in range(3):
        assert model.seen[e] == epochs[e], f"trainer epoch {e} did not read the loader's epoch {e}"


def test_an_iteration_that_delivered_nothing_does_not_use_up_the_epoch(packed_lmdb):
    """What Lightning does: iter() once to set up, then iter() again and read the epoch."""
    with FeedLoader(str(packed_lmdb), **KW) as loader:
        iter(loader)
        loader.sampler.set_epoch(0)
        assert [labels.tolist() for _, labels in loader] == epoch_labels(packed_lmdb, 0)
        assert [labels.tolist() for _, labels in loader] == epoch_labels(packed_lmdb, 1)  # no set_epoch: the next


VAL = dict(batch_size=16, train=False, size=16, device="cpu", decoder="opencv", num_workers=1)


def quiet_trainer(tmp_path, **kw):
    return pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path, **{"enable_checkpointing": False, **kw})


def in_order(path) -> list[list[int]]:
    with FeedLoader(str(path), **VAL) as loader:
        return [labels.tolist() for _, labels in loader]


def test_a_validation_loader_beside_the_training_one_reads_every_image_in_order(packed_lmdb, tmp_path):
    """fit(train, val): the sanity check reads 2 batches, then each epoch's validation all of
    them, from the first, in order."""
    model = Recorder()
    with FeedLoader(str(packed_lmdb), **KW) as train, FeedLoader(str(packed_lmdb), **VAL) as val:
        quiet_trainer(tmp_path, max_epochs=2).fit(model, train_dataloaders=train, val_dataloaders=val)
    expected = in_order(packed_lmdb)
    assert len(expected) == 3 and model.validated[0] == expected[:2]   # 48 images: 3 batches; the sanity check
    assert model.validated[1:] == [expected, expected]
    assert sorted(model.seen) == [0, 1]


def test_trainer_validate_reads_the_loader_once_in_order(packed_lmdb, tmp_path):
    model = Recorder()
    with FeedLoader(str(packed_lmdb), **VAL) as val:
        results = quiet_trainer(tmp_path).validate(model, dataloaders=val, verbose=False)
    assert model.validated == [in_order(packed_lmdb)]
    assert set(results[0]) == {"val_acc"} and 0 <= results[0]["val_acc"] <= 1


def test_a_resume_from_a_mid_epoch_checkpoint_reads_the_rest_of_that_epoch(packed_lmdb, tmp_path):
    """Lightning saves the loader's state_dict in its checkpoint and loads it on resume: the
    resumed run reads batch 2 onward of epoch 0, then epoch 1, as an uninterrupted run does.
    The loaders' seeds are drawn (seed=None) under different global seeds: the resumed
    loader takes the saved one."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    kw = {**KW, "seed": None}
    torch.manual_seed(11)
    whole = Recorder()
    every_2 = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=2, save_top_k=-1,
                              filename="{epoch}-{step}")
    with FeedLoader(str(packed_lmdb), **kw) as loader:
        quiet_trainer(tmp_path, max_epochs=2, enable_checkpointing=True, callbacks=[every_2]).fit(
            whole, train_dataloaders=loader)
    assert [len(whole.seen[e]) for e in (0, 1)] == [3, 3]
    torch.manual_seed(12)   # another draw: the checkpoint's seed must win
    resumed = Recorder()
    with FeedLoader(str(packed_lmdb), **kw) as loader:
        quiet_trainer(tmp_path, max_epochs=2).fit(resumed, train_dataloaders=loader,
                                                  ckpt_path=str(tmp_path / "ckpt" / "epoch=0-step=2.ckpt"))
    assert resumed.seen == {0: whole.seen[0][2:], 1: whole.seen[1]}


@pytest.mark.slow
def test_ddp_with_two_ranks_reads_disjoint_shares_and_validates_every_image_once(tmp_path):
    """torchrun, two ranks, Lightning's DDP on the CPU (gloo). Each rank seeds torch
    differently and leaves seed= out: the ranks still read one permutation (rank 0's draw),
    each its own half, and validation reads every image once over the two."""
    import os
    import sys

    from converters import pack
    from targets_helpers import labelled_folder
    from test_train_helpers import REPO, Job
    folder, labels = labelled_folder(tmp_path, n=48, fields=("label",))   # record i's label is i
    store = pack(folder, str(tmp_path / "ids.lmdb"), labels_csv=labels).out
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "--monitor-interval=0.2", os.path.join(REPO, "tests", "lightning_rank.py"), store, str(tmp_path)]
    job = Job(cmd, tmp_path / "torchrun.log")
    assert job.wait(timeout=240) == 0, job.output()[-4000:]
    ranks = [torch.load(tmp_path / f"rank-{r}.pt") for r in range(2)]
    assert ranks[0]["seed"] == ranks[1]["seed"]
    for epoch in (0, 1):
        shares = [sorted(i for batch in r["seen"][epoch] for i in batch) for r in ranks]
        assert len(shares[0]) == len(shares[1]) == 24 and not set(shares[0]) & set(shares[1])
        assert sorted(shares[0] + shares[1]) == list(range(48))
    validated = sorted(i for r in ranks for batch in r["validated"][-1] for i in batch)
    assert validated == list(range(48))
