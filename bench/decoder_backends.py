"""The decoders the decoder benchmark compares, each opened for a number of threads.

A backend's ``open(threads)`` returns a `Runner`: ``run(images)`` decodes every
encoded image of the list and returns the decoded H x W x 3 RGB arrays (or None when
``keep`` is false, so timing does not pay for copies out of DALI or the GPU). It raises
`Unavailable` with the reason and the fix when its library or device is missing.
Libraries are imported inside ``open``: none is needed to list the backends.
"""
from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np


class Unavailable(Exception):
    """A backend that cannot run here; the message says why and what to install."""


NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"
DALI_INSTALL = "pip install nvidia-dali-cuda130 (or pip install '.[dali]' from a clone of feedline)"


@dataclass
class Runner:
    run: Callable[[Sequence[bytes], bool], list | None]
    close: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class Backend:
    name: str
    library: str
    description: str
    open: Callable[[int], Runner]
    batched: bool = False             # decodes batches (DALI, GPU) rather than one image per call
    threaded: bool = True             # its speed depends on a thread count (else measured once)
    scale: tuple[int, int] = (1, 1)   # DCT-domain reduction: output is ceil(size * num / denom)
    crop_size: int | None = None      # decode_into a random-resized crop of this size
    options: dict = field(default_factory=dict)
    region_of: int | None = None      # decodes only the box of a random-resized crop of this size

    @property
    def output(self) -> str:
        if self.region_of:
            return f"region (crop {self.region_of} box)"
        if self.crop_size:
            return f"crop {self.crop_size}"
        return "full" if self.scale == (1, 1) else f"{self.scale[0]}/{self.scale[1]}"


# -- one image per call, over a thread pool -----------------------------------------
def per_image(decode: Callable[[bytes], np.ndarray]) -> Callable[[int], Runner]:
    """A runner factory mapping ``decode`` over the images: in this thread for 1 thread,
    else over a pool of ``threads`` threads kept for the runner's life."""
    def open_(threads: int) -> Runner:
        if threads <= 1:
            def run(images, keep=True):
                out = [decode(d) for d in images]
                return out if keep else None
            return Runner(run)
        pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-decode")

        def run_pool(images, keep=True):
            out = list(pool.map(decode, images, chunksize=max(1, len(images) // (8 * threads))))
            return out if keep else None
        return Runner(run_pool, lambda: pool.shutdown(wait=True))
    return open_


def pil_decode(data: bytes) -> np.ndarray:
    from PIL import Image
    with Image.open(io.BytesIO(data)) as im:
        if im.mode != "RGB":
            im = im.convert("RGB")
        return np.asarray(im)


def _opencv_open(threads: int) -> Runner:
    import cv2
    flag = getattr(cv2, "IMREAD_COLOR_RGB", None)
    if flag is not None:  # OpenCV >= 4.10 converts inside imdecode
        def decode(data):
            return cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    else:
        def decode(data):
            return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR),
                                cv2.COLOR_BGR2RGB)
    return per_image(decode)(threads)


def _turbojpeg(scale: tuple[int, int], fast: bool) -> Callable[[int], Runner]:
    def open_(threads: int) -> Runner:
        try:
            import turbojpeg
            from turbojpeg import TJPF_RGB, TurboJPEG
        except ImportError as exc:
            raise Unavailable(f"PyTurboJPEG does not import ({exc}): pip install 'PyTurboJPEG<2'") from None
        try:
            tj = TurboJPEG()
        except Exception as exc:
            raise Unavailable(f"libturbojpeg cannot be loaded ({exc}): sudo apt-get install libturbojpeg0") \
                from None
        flags = (turbojpeg.TJFLAG_FASTDCT | turbojpeg.TJFLAG_FASTUPSAMPLE) if fast else 0
        factor = None if scale == (1, 1) else scale

        def decode(data):
            return tj.decode(data, TJPF_RGB, factor, flags)
        return per_image(decode)(threads)
    return open_


def feedline_plan(images: Sequence[bytes], size: int = 224):
    """The boxes and flips feedline's loader would draw for these images in epoch 0, seed 0."""
    from feedline.planning.augment import AugmentSpec, plan
    sizes = np.array([image_size(d) for d in images]).reshape(-1, 2)
    return plan(AugmentSpec(size=size, train=True), 0, 0, np.arange(len(images)), sizes[:, 0], sizes[:, 1])


def _feedline_open(name: str, size: int = 224, **options) -> Callable[[int], Runner]:
    """feedline's own decoder: ``decode_into`` a random-resized crop of ``size`` (the
    loader's per-sample work)."""
    def open_(threads: int) -> Runner:
        from feedline.decoders import Box, get_decoder
        from feedline.core.errors import BackendUnavailable
        try:
            decoder = get_decoder(name, **options)
        except BackendUnavailable as exc:
            raise Unavailable(str(exc)) from None
        plans: dict = {}   # per image list: its boxes and flips, drawn outside the timing
        pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-feedline") if threads > 1 else None

        def run(images, keep=True):
            key = (id(images), len(images))
            if key not in plans:
                plans[key] = feedline_plan(images, size)
            boxes, flips = plans[key]
            out = np.empty((len(images), size, size, 3), np.uint8)

            def one(i):
                decoder.decode_into(images[i], Box(*boxes[i]), bool(flips[i]), out[i])
            if pool is None:
                for i in range(len(images)):
                    one(i)
            else:
                list(pool.map(one, range(len(images)), chunksize=max(1, len(images) // (8 * threads))))
            return list(out) if keep else None
        return Runner(run, (lambda: pool.shutdown(wait=True)) if pool else (lambda: None))
    return open_


def image_size(data: bytes) -> tuple[int, int]:
    """(height, width) from the header, without decoding."""
    from PIL import Image
    with Image.open(io.BytesIO(data)) as im:
        return im.height, im.width


def _nvimgcodec(region: bool, size: int = 224) -> Callable[[int], Runner]:
    """nvImageCodec's CPU decode (one decoder per thread): the whole image, or only the
    region of the random-resized-crop box the loader would draw (not resized)."""
    def open_(threads: int) -> Runner:
        try:
            from feedline.decoders.nvimgcodec_library import ThreadDecoders, load_nvimgcodec
            nv = load_nvimgcodec()
        except ImportError as exc:
            raise Unavailable(f"nvImageCodec does not import ({exc}): pip install nvidia-nvimgcodec-cu13") from None
        decoders = ThreadDecoders()
        params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.SRGB)
        boxes: dict = {}

        def decode(item):
            data, box = item
            stream = nv.CodeStream(data)
            if box is not None:
                top, left, h, w = (int(v) for v in box)
                stream = stream.get_sub_code_stream(region=nv.Region(start=(top, left), end=(top + h, left + w)))
            return np.asarray(decoders.get().decode(stream, params=params))
        mapped = per_image(decode)(threads)

        def run(images, keep=True):
            key = (id(images), len(images))
            if key not in boxes:
                boxes[key] = feedline_plan(images, size)[0] if region else [None] * len(images)
            return mapped.run(list(zip(images, boxes[key])), keep)
        return Runner(run, mapped.close)
    return open_


def _simplejpeg(scale: tuple[int, int]) -> Callable[[int], Runner]:
    def open_(threads: int) -> Runner:
        try:
            import simplejpeg
        except ImportError as exc:
            raise Unavailable(f"simplejpeg does not import ({exc}): pip install simplejpeg") from None
        num, denom = scale

        def decode(data):
            if denom == 1:
                return simplejpeg.decode_jpeg(data, "rgb")
            h, w = simplejpeg.decode_jpeg_header(data)[:2]
            return simplejpeg.decode_jpeg(data, "rgb", min_height=-(-h * num // denom), min_width=-(-w * num // denom))
        return per_image(decode)(threads)
    return open_


def region_decode_floor(images: Sequence[bytes], threads: int, size: int = 224) -> tuple[float, str]:
    """The decode floor: the best single-thread images/s of feedline's region decodes
    (``decode_into`` of the loader's random-resized crops, nvimgcodec strict and not),
    times ``threads``. One warm-up pass, then the best of three interleaved passes."""
    import time
    candidates = {"nvimgcodec (strict)": _feedline_open("nvimgcodec", size),
                  "nvimgcodec (strict=False, region)": _feedline_open("nvimgcodec", size, strict=False)}
    runners = {}
    for label, open_ in candidates.items():
        try:
            runners[label] = open_(1)
        except Unavailable:
            continue
    if not runners:
        raise Unavailable("no feedline region decoder is available")
    best: dict[str, float] = {}
    for label, runner in runners.items():
        runner.run(images[:8], False)
    for _ in range(3):
        for label, runner in runners.items():
            start = time.perf_counter()
            runner.run(images, False)
            best[label] = max(best.get(label, 0.0), len(images) / (time.perf_counter() - start))
    label = max(best, key=best.get)
    for runner in runners.values():
        runner.close()
    return best[label] * threads, f"{label}: {best[label]:.0f} images/s on one thread x {threads} threads"


# -- batches: DALI and the GPU --------------------------------------------------------
def _dali_open(device: str, batch: int, hw_decoder_load: float | None = None) -> Callable[[int], Runner]:
    def open_(threads: int) -> Runner:
        if device == "mixed":
            _need_cuda()
        try:
            from nvidia.dali import fn, pipeline_def, types
        except ImportError as exc:
            raise Unavailable(f"NVIDIA DALI does not import ({exc}): {DALI_INSTALL}") from None
        options = {} if hw_decoder_load is None else {"hw_decoder_load": hw_decoder_load}

        @pipeline_def(batch_size=batch, num_threads=threads, device_id=0 if device == "mixed" else None,
                      exec_async=False, exec_pipelined=False, prefetch_queue_depth=1)
        def decode_pipeline():
            encoded = fn.external_source(name="encoded", dtype=types.UINT8)
            return fn.decoders.image(encoded, device=device, output_type=types.RGB, **options)

        pipe = decode_pipeline()
        pipe.build()

        def run(images, keep=True):
            out = [] if keep else None
            for start in range(0, len(images), batch):
                chunk = [np.frombuffer(d, np.uint8) for d in images[start:start + batch]]
                pipe.feed_input("encoded", chunk)
                decoded, = pipe.run()
                if keep:
                    decoded = decoded.as_cpu() if device == "mixed" else decoded
                    out += [np.array(decoded.at(i)) for i in range(len(chunk))]
            if device == "mixed":
                _cuda_sync()
            return out
        return Runner(run)
    return open_


def _torchvision_open(batch: int) -> Callable[[int], Runner]:
    def open_(threads: int) -> Runner:
        _need_cuda()
        try:
            import torchvision.io
        except Exception as exc:  # a torchvision built for another torch fails in odd ways
            raise Unavailable(f"torchvision does not import ({type(exc).__name__}: {exc}): "
                              "pip install torchvision matching your torch") from None
        import torch
        tensors: dict = {}   # per image list: its uint8 tensors, made outside the timing

        def run(images, keep=True):
            key = (id(images), len(images))
            if key not in tensors:
                tensors[key] = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in images]
            out = [] if keep else None
            for start in range(0, len(images), batch):
                chunk = tensors[key][start:start + batch]
                decoded = torchvision.io.decode_jpeg(chunk, mode=torchvision.io.ImageReadMode.RGB, device="cuda")
                if keep:
                    out += [t.permute(1, 2, 0).cpu().numpy() for t in decoded]
            torch.cuda.synchronize()
            return out
        return Runner(run)
    return open_


def _need_cuda() -> None:
    import torch
    if not torch.cuda.is_available():
        raise Unavailable(NO_CUDA)


def _cuda_sync() -> None:
    import torch
    torch.cuda.synchronize()


def has_hardware_jpeg_decoder() -> tuple[bool, str]:
    """Whether the GPU has NVJPG engines (A100/A30, H100/H200, B200 class, L4), and why not."""
    import torch
    if not torch.cuda.is_available():
        return False, NO_CUDA
    props = torch.cuda.get_device_properties(0)
    if (props.major, props.minor) in ((8, 0), (9, 0), (10, 0)) or " L4" in props.name:
        return True, ""
    return False, f"the {props.name} has no hardware JPEG decoder (A100/H100/H200/B200/L4 have one)"


def backends(batch: int = 64, feedline: bool = True) -> list[Backend]:
    """Every backend, in table order; PIL first (the reference)."""
    fast = {"fast_dct": True, "fast_upsample": True}
    rows = [
        Backend("pil", "Pillow", "PIL Image.open + RGB", per_image(pil_decode)),
        Backend("opencv", "OpenCV", "cv2.imdecode to RGB", _opencv_open),
        Backend("turbojpeg", "PyTurboJPEG", "libjpeg-turbo, default flags", _turbojpeg((1, 1), False)),
        Backend("turbojpeg-fast", "PyTurboJPEG", "fast DCT + fast upsampling", _turbojpeg((1, 1), True),
                options=fast),
        Backend("turbojpeg-1/2", "PyTurboJPEG", "DCT-domain 1/2 scaling", _turbojpeg((1, 2), False),
                scale=(1, 2)),
        Backend("turbojpeg-1/4", "PyTurboJPEG", "DCT-domain 1/4 scaling", _turbojpeg((1, 4), False),
                scale=(1, 4)),
        Backend("nvimgcodec", "nvImageCodec", "CPU libjpeg-turbo 3.1, full image", _nvimgcodec(False)),
        Backend("nvimgcodec-region", "nvImageCodec", "CPU, only the random-resized-crop box (not resized)",
                _nvimgcodec(True), region_of=224),
        Backend("simplejpeg", "simplejpeg", "libjpeg-turbo (pip wheel), full image", _simplejpeg((1, 1))),
        Backend("simplejpeg-1/2", "simplejpeg", "DCT-domain 1/2 scaling", _simplejpeg((1, 2)), scale=(1, 2)),
        Backend("dali-cpu", "DALI", "fn.decoders.image, device cpu", _dali_open("cpu", batch), batched=True),
        Backend("dali-mixed", "DALI", "nvJPEG on CUDA cores (hw_decoder_load=0)",
                _dali_open("mixed", batch, 0.0), batched=True),
        Backend("dali-mixed-hw", "DALI", "nvJPEG with the hardware decoder (hw_decoder_load=0.65)",
                _hardware(_dali_open("mixed", batch, 0.65)), batched=True),
        Backend("torchvision-nvjpeg", "torchvision", "torchvision.io.decode_jpeg(device='cuda'), batched",
                _torchvision_open(batch), batched=True, threaded=False),
    ]
    if feedline:
        crop = "decode_into: random-resized crop 224 + flip"
        rows.append(Backend("feedline:nvimgcodec", "feedline", crop + " (default: strict, libjpeg-turbo at DCT scale)",
                            _feedline_open("nvimgcodec", 224), crop_size=224))
        rows.append(Backend("feedline:nvimgcodec-region", "feedline", crop + " (strict=False: nvImageCodec region "
                            "decode, DCT-scaled when the crop allows)", _feedline_open("nvimgcodec", 224, strict=False),
                            crop_size=224, options={"strict": False}))
        from feedline.decoders import decoder_names
        for name in decoder_names():   # the registry's, yours included (a 'feedline.decoders' entry point)
            if name != "nvimgcodec":
                rows.append(Backend(f"feedline:{name}", "feedline", crop, _feedline_open(name, 224), crop_size=224))
    return rows


def _hardware(open_: Callable[[int], Runner]) -> Callable[[int], Runner]:
    def checked(threads: int) -> Runner:
        ok, reason = has_hardware_jpeg_decoder()
        if not ok:
            raise Unavailable(reason)
        return open_(threads)
    return checked
