"""grid_splice: on the GPU, nvImageCodec decoding RandomResizedCrop boxes two ways, in one
run: region requests on the original JPEGs (what engine='gpu' does on an original store)
against spliced crops of the same JPEGs transcoded to the restart grid (what it does on a
grid store, issue 24). Per backend (the hardware JPEG decoder, nvJPEG on CUDA; the CPU
backend with --cpu-smoke), batches of --batch-size, interleaved repeats, medians.

    python bench/gpu/grid_splice.py --data photos.lmdb --out grid_splice.json

A splice's host time (parse, splice, CodeStream) is inside its timing, as is the region
request's. Where GPU region decode is unsafe (feedline.sources.gpu_region), the original
JPEGs are decoded whole and cropped on the GPU instead, as engine='gpu' then does. The transcode to the grid is done once, before timing (pack's work).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/grid_splice.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common import format_table, ratio, say  # noqa: E402
from bench.gpu import common  # noqa: E402

log = logging.getLogger(__name__)
NAME = "grid_splice"
BACKENDS = ("HW_GPU_ONLY", "GPU_ONLY")


def batches_of(args):
    """(original records, their grid transcodes, RandomResizedCrop boxes), --images of them."""
    from converters.libjpeg_transcode import TranscodeError, transcode_to_grid
    from feedline.planning.augment import random_resized_crop, uniforms
    from feedline.stores import open_dataset
    originals, grids, sizes = [], [], []
    with open_dataset(args.data) as store:
        for i in range(min(args.images, len(store))):
            data = bytes(memoryview(store.read(i)))
            try:
                grids.append(transcode_to_grid(data))
            except TranscodeError:
                continue
            originals.append(data)
            sizes.append(tuple(int(v) for v in store.sizes[i]))
    boxes = random_resized_crop([h for h, _ in sizes], [w for _, w in sizes],
                                uniforms(args.seed, 0, range(len(sizes)), 22))
    return originals, grids, [tuple(int(v) for v in b) for b in boxes]


def decoders(nv, device: str, threads: int) -> dict:
    if device == "cpu":
        return {"CPU_ONLY": nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=threads,
                                       backends=[nv.Backend(nv.CPU_ONLY)])}
    return {kind: nv.Decoder(max_num_cpu_threads=threads, backends=[nv.Backend(getattr(nv, kind))])
            for kind in BACKENDS}


def one_pass(nv, decoder, how: str, originals, grids, boxes, batch: int, device: str,
             regions: bool = True) -> tuple[float, int]:
    """Seconds to decode every box once, batch by batch, and how many came back.
    ``regions`` False: the originals are decoded whole and cropped (region decode unsafe)."""
    import torch
    from feedline.decoders.base import Box
    from feedline.sources.gpu_region import crop_on_device
    from feedline.sources.gpu_splice import GridSplice
    splice = GridSplice(nv, device)
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else 0
    done = 0
    common.sync(device)
    t0 = time.perf_counter()
    for start in range(0, len(boxes), batch):
        chunk = range(start, min(start + batch, len(boxes)))
        if how == "splice":
            streams = [splice.stream(k, grids[i], Box(*boxes[i])) for k, i in enumerate(chunk)]
        elif regions:
            streams = [nv.CodeStream(originals[i]).get_sub_code_stream(region=nv.Region(
                start=boxes[i][:2], end=(boxes[i][0] + boxes[i][2], boxes[i][1] + boxes[i][3]))) for i in chunk]
        else:
            streams = [nv.CodeStream(originals[i]) for i in chunk]
        common.sync(device)   # torchvision#9606: nothing queued on the decoder's stream
        images = decoder.decode(streams, cuda_stream=stream)
        if how == "splice":
            images = splice.crops(list(images))
        elif not regions:
            images = [crop_on_device(image, Box(*boxes[i]), torch.device(device)) for image, i in zip(images, chunk)]
        done += sum(image is not None for image in images)
    common.sync(device)
    return time.perf_counter() - t0, done


def run(args) -> dict:
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    device = common.device_for(args, data=args.data, imports=("nvidia.nvimgcodec",))
    from feedline.sources.gpu_region import gpu_region_decode
    nv = load_nvimgcodec()
    regions = device == "cpu" or gpu_region_decode(0, common.region_decode())
    originals, grids, boxes = batches_of(args)
    say(f"{NAME}: {len(boxes)} images, batch {args.batch_size}, device {device}, originals "
        + ("by region" if regions else "decoded whole and cropped (GPU region decode unsafe here)"))
    rows = []
    params = {k: v for k, v in vars(args).items() if k != "out"} | {"device": device, "gpu": common.gpu_name()}

    def write() -> Path:
        best = max((r for r in rows if r["x_region"]), key=lambda r: r["splice_img_s"], default=None)
        return common.write(NAME, rows, params, args.out, originals_by="region" if regions else "whole image + crop",
                            splice_x_region=best["x_region"] if best else None,
                            splice_backend=best["backend"] if best else None)
    for kind, decoder in decoders(nv, device, args.threads).items():
        seconds = {"region": [], "splice": []}
        counts, reason = {}, None
        try:
            for r in range(1 + args.repeats):   # the first round warms both up
                for how in seconds:
                    s, counts[how] = one_pass(nv, decoder, how, originals, grids, boxes, args.batch_size, device,
                                              regions)
                    if r:
                        seconds[how].append(s)
        except Exception as exc:  # a backend this GPU lacks: said in the JSON, the others still run
            reason = f"{type(exc).__name__}: {exc}"
        rate = {how: counts[how] / common.median(s) if s and counts.get(how) else None
                for how, s in seconds.items()}
        if reason is None and counts.get("splice", 0) < len(boxes):
            reason = f"{len(boxes) - counts.get('splice', 0)} of {len(boxes)} spliced crops not decoded"
        rows.append({"backend": kind, "region_img_s": rate["region"], "splice_img_s": rate["splice"],
                     "x_region": ratio(rate["splice"], rate["region"]), "decoded": counts,
                     "samples_s": seconds, "reason": reason})
        write()   # each backend as soon as it is measured
    say(format_table(rows, [("backend", "backend"), ("region img/s", "region_img_s"),
                            ("splice img/s", "splice_img_s"), ("splice x region", "x_region"), ("note", "reason")]))
    path = write()
    say(f"wrote {path}")
    return {"path": str(path), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_common(p)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--images", type=int, default=2048, help="records decoded per pass (default 2048)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    common.apply_smoke(args)
    if args.cpu_smoke:
        args.images = 16
    common.positive(p, args, "batch_size", "images", "threads", "repeats")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
