"""FeedLoader under PyTorch Lightning: the loader's epoch is the trainer's epoch. Lightning
calls ``set_epoch`` on a loader's ``sampler`` at each epoch's start and may call ``iter()``
on it more than once before the first batch; neither may move the loader ahead."""
from __future__ import annotations

import pytest
import torch

from feedline import FeedLoader

pl = pytest.importorskip("lightning.pytorch", reason="needs lightning (pip install lightning; in the test extra)")

KW = dict(batch_size=16, shuffle=True, train=True, size=16, device="cpu", decoder="opencv", num_workers=1, seed=5)


class Recorder(pl.LightningModule):
    """A one-layer model that keeps, per trainer epoch, the labels of every batch it saw."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3 * 16 * 16, 4)
        self.seen: dict[int, list[list[int]]] = {}

    def training_step(self, batch, _):
        images, labels = batch
        self.seen.setdefault(self.current_epoch, []).append(labels.tolist())
        return torch.nn.functional.cross_entropy(self.layer(images.reshape(len(images), -1)), labels)

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
