"""One rank of the Lightning DDP test (run by torchrun; Lightning's DDP on the CPU, gloo): a
LightningModule that builds its FeedLoaders where Lightning users build them, in
``train_dataloader`` and ``val_dataloader`` (after Lightning has joined the process group),
without seed=, after seeding torch differently on each rank. Saves to OUT/rank-R.pt the
record ids each epoch trained on, each validation's ids and the loader's seed. The store's
label of record i is i (tests/test_loader_lightning.py packs it so)."""
from __future__ import annotations

import os
import sys

import lightning.pytorch as pl
import torch

from feedline import FeedLoader, OrderSpec

OPTIONS = dict(batch_size=4, size=16, device="cpu", decoder="opencv", num_workers=1)


class Recorder(pl.LightningModule):
    def __init__(self, path: str):
        super().__init__()
        self.path, self.layer = path, torch.nn.Linear(3 * 16 * 16, 48)
        self.seen: dict[int, list[list[int]]] = {}
        self.validated: list[list[list[int]]] = []
        self.loaders: list[FeedLoader] = []

    def train_dataloader(self):
        self.loaders.append(FeedLoader(self.path, shuffle=True, train=True, **OPTIONS))
        return self.loaders[-1]

    def val_dataloader(self):
        self.loaders.append(FeedLoader(self.path, train=False, order=OrderSpec(even_shards=False), **OPTIONS))
        return self.loaders[-1]

    def training_step(self, batch, _):
        images, labels = batch
        self.seen.setdefault(self.current_epoch, []).append(labels.tolist())
        return torch.nn.functional.cross_entropy(self.layer(images.reshape(len(images), -1)), labels)

    def on_validation_epoch_start(self):
        self.validated.append([])

    def validation_step(self, batch, _):
        self.validated[-1].append(batch[1].tolist())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main(path: str, out: str) -> None:
    rank = int(os.environ["RANK"])
    torch.manual_seed(100 + rank)   # the ranks' global generators differ
    model = Recorder(path)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0)
    trainer.fit(model)
    torch.save({"seen": model.seen, "validated": model.validated, "seed": model.loaders[0].config.seed},
               os.path.join(out, f"rank-{rank}.pt"))
    for loader in model.loaders:
        loader.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
