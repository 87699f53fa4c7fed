"""feedline.loading.loader_surface: what code written for a DataLoader reads from FeedLoader. Its
``dataset[i]`` is a record as torchvision's ImageFolder gives one: the stored image as an RGB
PIL image (the packed JPEG's own pixels) and its class, or the record's targets."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from feedline import FeedLoader

KW = dict(batch_size=8, size=32, device="cpu", decoder="opencv", num_workers=0)


def test_dataset_items_are_the_packed_photos_and_their_classes(packed_lmdb, photo_folder):
    with FeedLoader(str(packed_lmdb), **KW) as loader:
        dataset = loader.dataset
        assert isinstance(dataset, torch.utils.data.Dataset) and len(dataset) == 48
        for i in (0, 17, 47, -1):
            image, label = dataset[i]
            record = i % 48
            path = loader.store.path(record)
            with Image.open(photo_folder / path) as original:   # stored byte for byte: the same pixels
                assert image.mode == "RGB" and np.array_equal(np.asarray(image), np.asarray(original.convert("RGB")))
            assert image.size == loader.store.size(record)[::-1]   # PIL: (width, height)
            assert isinstance(label, int) and dataset.classes[label] == path.split("/")[0]
        with pytest.raises(IndexError, match=r"record 48 is out of range \(the store has 48\)"):
            dataset[48]
        assert dataset.classes == loader.store.classes and dataset.fields == {"label": {}}


def test_a_store_with_targets_gives_each_records_targets(tmp_path):
    from converters import pack
    from targets_helpers import labelled_folder
    folder, labels = labelled_folder(tmp_path, n=6)
    store = pack(folder, str(tmp_path / "scene.lmdb"), labels_csv=labels).out
    with FeedLoader(store, **KW) as loader:
        image, targets = loader.dataset[4]
        assert targets == loader.store.targets(4) and set(targets) == {"label", "labels", "target", "boxes", "keypoints"}
        assert len(targets["boxes"]) == 4 and image.size == loader.store.size(4)[::-1]


def test_lightning_reads_a_sampler_with_set_epoch_and_no_batch_sampler(packed_lmdb):
    with FeedLoader(str(packed_lmdb), **KW) as loader:
        assert loader.batch_sampler is None and loader.batch_size == 8
        loader.sampler.set_epoch(3)
        assert loader.state_dict()["epoch"] == 3
