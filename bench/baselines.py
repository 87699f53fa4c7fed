"""The loaders FeedLoader is measured against, each doing the same work per image:
random-resized crop to 224 (scale 0.08-1, ratio 3/4-4/3), horizontal flip with
probability 1/2, float32 normalized with the ImageNet mean and std, N x 3 x H x W.

Each ``*_stream`` function returns a `bench.streams.LoaderStream`; FeedLoader's also
reports its own per-stage counters.
torchvision is not used: its RandomResizedCrop, RandomHorizontalFlip, ToTensor and
Normalize are written out with PIL, numpy and torch, as torchvision does them for PIL
images.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from bench.streams import LoaderStream, closer, forever, plain_stream
SCALE, RATIO = (0.08, 1.0), (3 / 4, 4 / 3)
# torchvision's ImageNet normalization, as a user's training script writes it
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


# -- torch DataLoader + PIL ------------------------------------------------------------
def rrc_params(height: int, width: int, scale=SCALE, ratio=RATIO) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params: (top, left, height, width), torch's RNG."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect = math.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = torch.randint(0, height - h + 1, size=(1,)).item()
            left = torch.randint(0, width - w + 1, size=(1,)).item()
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class PilFolderDataset(torch.utils.data.Dataset):
    """ImageFolder + RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize."""

    def __init__(self, root: str, size: int = 224, mean=IMAGENET_MEAN, std=IMAGENET_STD):
        from feedline.dataset.scan import scan_folder
        scan = scan_folder(str(root))
        self.samples = [(f"{scan.root}/{p}", label) for p, label in zip(scan.paths, scan.labels)]
        self.size = size
        self.mean = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        from PIL import Image
        path, label = self.samples[index]
        with open(path, "rb") as fh:       # torchvision's pil_loader
            image = Image.open(fh).convert("RGB")
        top, left, h, w = rrc_params(image.height, image.width)
        image = image.crop((left, top, left + w, top + h)).resize((self.size, self.size),
                                                                   Image.Resampling.BILINEAR)
        if torch.rand(1) < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        tensor = torch.from_numpy(np.array(image, np.uint8, copy=True)).permute(2, 0, 1).contiguous()
        tensor = tensor.to(torch.float32).div_(255)
        return tensor.sub_(self.mean).div_(self.std), label


def dataloader_stream(folder: str, batch_size: int, workers: int, device: str,
                      size: int = 224) -> LoaderStream:
    cuda = device.startswith("cuda")
    loader = torch.utils.data.DataLoader(
        PilFolderDataset(folder, size), batch_size=batch_size, shuffle=True, num_workers=workers,
        pin_memory=cuda, drop_last=True, persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(0))
    return plain_stream(forever(lambda: loader), device)


# -- DALI on the CPU ------------------------------------------------------------------
def dali_cpu_stream(folder: str, batch_size: int, threads: int, device: str,
                    size: int = 224) -> LoaderStream:
    """fn.readers.file -> fn.decoders.image_random_crop (cpu) -> fn.resize ->
    fn.crop_mirror_normalize, device_id=None, through DALI's PyTorch iterator."""
    from bench.common import quiet_stderr
    with quiet_stderr():   # DALI loads nvImageCodec, whose missing TIFF/JPEG 2000 plug-ins print from C
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=batch_size, num_threads=threads, device_id=None, seed=0)
    def pipeline():
        jpegs, labels = fn.readers.file(file_root=str(folder), random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=list(SCALE), random_aspect_ratio=list(RATIO))
        images = fn.resize(images, resize_x=size, resize_y=size)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=[255 * m for m in IMAGENET_MEAN],
                                          std=[255 * s for s in IMAGENET_STD],
                                          mirror=fn.random.coin_flip(probability=0.5))
        return images, labels

    pipe = pipeline()
    pipe.build()
    iterator = DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader",
                                   last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)

    def epoch():
        for out in iterator:
            yield out[0]["images"], out[0]["labels"].view(-1).long()
    return plain_stream(forever(epoch), device)


# -- FeedLoader -----------------------------------------------------------------------
def feedloader_stream(packed: str, batch_size: int, threads: int, device: str, decoder: str = "auto",
                      size: int = 224, engine: str = "auto") -> LoaderStream:
    """FeedLoader with its defaults but for the engine and decoder asked for ("auto": the default)."""
    from feedline.loading.loader import FeedLoader
    loader = FeedLoader(packed, batch_size=batch_size, shuffle=True, train=True, size=size,
                        engine=engine, decoder=decoder, num_workers=threads, device=device, drop_last=True)
    stream = forever(lambda: loader)
    close_stream = closer(stream)

    def close():
        close_stream()
        loader.close()

    def stats():
        """Per-image time of each stage in the current epoch so far (thread time, summed
        over threads, as LoaderStats keeps it). Rates and wait fractions are left out: the
        epoch's clock also ran while the other loaders were measured."""
        try:
            counters = loader.stats.as_dict()
        except Exception as exc:  # LoaderStats may change; its counters are a diagnostic
            return {"error": f"{type(exc).__name__}: {exc}"}
        n = max(int(counters.get("images") or 0), 1)
        out = {"images": counters.get("images"), "batches": counters.get("batches")}
        for key, value in counters.items():
            if key.endswith("_s") and "per_" not in key and key != "elapsed_s" and isinstance(value, (int, float)):
                out[f"{key[:-2]}_ms_per_image"] = 1e3 * value / n
        return out
    return LoaderStream(stream, close, stats)
