"""One rank of the two-rank remote test (run by torchrun, gloo): reads two epochs of a bucket's
shards through FeedLoader and writes, per epoch, a hash of every image it got and the shards
it fetched, to OUT/rank-R.json."""
from __future__ import annotations

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

from feedline import FeedLoader
from feedline.stores import RemoteOptions, open_dataset


def main(url: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    epochs = []
    # Each rank its own cache, as on two machines: what it fetches is its own share.
    store = open_dataset(url, remote=RemoteOptions(cache_dir=os.path.join(out, f"cache-{rank}")))
    with FeedLoader(store, batch_size=4, train=False, size=32, mean=None, num_workers=1, device="cpu") as loader:
        cache = loader.store.cache
        for epoch in range(2):
            loader.set_epoch(epoch)
            before = len(cache.fetched)
            hashes = [hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()
                      for images, _ in loader for image in images]
            batches = torch.tensor([len(hashes)])
            dist.all_reduce(batches, op=dist.ReduceOp.MAX)
            epochs.append({"hashes": hashes, "fetched": cache.fetched[before:], "max_images": int(batches),
                           "order": loader.config.order.value})
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as fh:
        json.dump(epochs, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
