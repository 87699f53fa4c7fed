"""FFCV 1.0.2 as a baseline, when it is installed (bench/loaders.py --ffcv).

Two .beton files are written once into the cache from the packed file's records:
"same-jpeg" holds the very JPEG bytes FeedLoader reads (a field that passes the bytes
through, read back as FFCV's RGBImageField); "reencoded" is what FFCV's own writer
makes of the decoded images (RGBImageField(write_mode="jpg", jpeg_quality=90), no
resize). The pipeline does the common work: RandomResizedCropRGBImageDecoder(224) ->
RandomHorizontalFlip -> NormalizeImage(float32) -> ToTensor -> ToTorchImage, random
order, drop_last, os_cache=True, num_workers = the thread count.

FFCV is not a dependency of anything here. It builds from PyPI's source with the
system's libturbojpeg0-dev, libopencv-dev and pkg-config, in an environment that also
sees this project's packages: `pip install --no-build-isolation ffcv==1.0.2 numba
fastargs terminaltables assertpy pytorch_pfn_extras`. Note that FFCV sets torch's
thread count (to 1 when imported, to num_workers at each epoch).
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from bench.baselines import IMAGENET_MEAN, IMAGENET_STD, RATIO, SCALE
from bench.data import cache_key
from bench.streams import LoaderStream, forever, plain_stream

VARIANTS = {"same-jpeg": "the packed file's JPEG bytes", "reencoded": "FFCV's own re-encode, JPEG quality 90"}


def ffcv_stream(packed: Path, cache: Path, variant: str, batch_size: int, threads: int, device: str,
                size: int = 224) -> LoaderStream:
    from ffcv.fields import RGBImageField
    from ffcv.fields.decoders import IntDecoder
    from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage

    beton = cache / "ffcv" / f"{cache_key(packed)}-{variant}.beton"
    if not beton.is_file():
        write_beton(packed, beton, variant, threads)
    image = [RandomResizedCropRGBImageDecoder((size, size), scale=SCALE, ratio=RATIO), RandomHorizontalFlip(),
             NormalizeImage(np.array(IMAGENET_MEAN) * 255, np.array(IMAGENET_STD) * 255, np.float32),
             ToTensor(), ToTorchImage()]
    loader = Loader(str(beton), batch_size=batch_size, num_workers=threads, order=OrderOption.RANDOM,
                    drop_last=True, os_cache=True, custom_fields={"image": RGBImageField},
                    pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]})
    return plain_stream(forever(lambda: loader), device)


def write_beton(packed: Path, out: Path, variant: str, threads: int) -> None:
    """The records of ``packed`` as an FFCV .beton (written under a temporary name)."""
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    from feedline.stores import open_dataset
    with open_dataset(packed) as store:
        records = [(bytes(memoryview(store.read(i))), int(store.label(i))) for i in range(len(store))]
    if variant == "reencoded":
        from PIL import Image
        records = [(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")), label) for data, label in records]
        field = RGBImageField(write_mode="jpg", jpeg_quality=90)
    else:
        field = _same_bytes_field()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    DatasetWriter(str(tmp), {"image": field, "label": IntField()}, num_workers=threads).from_indexed_dataset(
        _Records(records))
    os.replace(tmp, out)


class _Records:
    """The indexed data set FFCV's writer reads: (image, label) pairs."""

    def __init__(self, records: list):
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int):
        return self.records[index]


def _same_bytes_field():
    """An RGBImageField that stores the JPEG bytes it is given, unchanged (FFCV's own
    field decodes nothing at write time but re-encodes every image)."""
    from ffcv.fields import RGBImageField
    from ffcv.fields.rgb_image import IMAGE_MODES
    from PIL import Image

    class SameBytesField(RGBImageField):
        def __init__(self):
            super().__init__(write_mode="jpg")

        def encode(self, destination, data, malloc):
            with Image.open(io.BytesIO(data)) as im:   # the header only
                destination["height"], destination["width"] = im.height, im.width
            destination["mode"] = IMAGE_MODES["jpg"]
            encoded = np.frombuffer(data, np.uint8)
            destination["data_ptr"], storage = malloc(encoded.nbytes)
            storage[:] = encoded
    return SameBytesField()
