"""Stage (a) of the GPU check, in 30 seconds: does the machine work at all, and is GPU
region decoding safe here?

    python .ci/gpu/smoke.py --out smoke.json [--dali]

One process: `import torch, nvidia.nvimgcodec` (and DALI with --dali), one batch decoded
on nvImageCodec's CPU backend, then the CUDA device and the same batch of whole images
decoded on the GPU, compared with the CPU's decode. Without CUDA it stops there with exit
code 3 (the check's "skipped: no CUDA device"). Then, each in
a child process under its own cap (a crash there is the finding, not the end of the
check): one batch of region decodes through nvImageCodec (what engine="gpu" does; crashes
with nvImageCodec 0.9, NVIDIA/nvImageCodec#55), and with --dali one DALI image_slice batch.
Writes a JSON object; "region_decode_safe" false makes the check set
FEEDLINE_GPU_REGION_DECODE=0 for every later stage.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

BATCH = 8
NO_CUDA = 3       # the exit code the check reads as "skipped: no CUDA device"
TOLERANCE = 2.0   # mean absolute difference, 0..255: nvJPEG and libjpeg-turbo round differently


def jpegs(n: int = BATCH) -> list[bytes]:
    import cv2
    from feedline.sample import make_image, photo_paths
    photos = [cv2.imread(p, cv2.IMREAD_COLOR) for p in photo_paths()]
    rng = random.Random(0)
    return [make_image(rng, photos[k % len(photos)], gray_fraction=0.0) for k in range(n)]


def boxes(images) -> list[tuple[int, int, int, int]]:
    """An ordinary in-bounds crop (top, left, height, width) of each image, as RandomResizedCrop draws."""
    out = []
    for k, image in enumerate(images):
        h, w = image.shape[:2]
        out.append((h // 7 + k, w // 5, h // 2, w // 2 + k))
    return out


def decode(nv, data: list, backend) -> list:
    import numpy as np
    cpu_only = {"device_id": nv.NVIMGCODEC_DEVICE_CPU_ONLY} if list(backend) == [nv.CPU_ONLY] else {}
    decoder = nv.Decoder(backends=[nv.Backend(b) for b in backend], **cpu_only)
    params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.SRGB)
    return [np.asarray(image.cpu()) for image in decoder.decode(data, params=params)]


def gpu_backends(nv) -> list:
    return [nv.HW_GPU_ONLY, nv.GPU_ONLY, nv.HYBRID_CPU_GPU]   # engine="gpu"'s choice


def child_region(out: dict) -> None:
    import numpy as np
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    nv = load_nvimgcodec()
    data = jpegs()
    cpu = decode(nv, data, [nv.CPU_ONLY])
    streams = [nv.CodeStream(d).get_sub_code_stream(region=nv.Region(start=(t, l), end=(t + h, l + w)))
               for d, (t, l, h, w) in zip(data, boxes(cpu))]
    print("region: decoding", flush=True)
    gpu = decode(nv, streams, gpu_backends(nv))
    diffs = [float(np.abs(g.astype(int) - c[t:t + h, l:l + w].astype(int)).mean()) if g.shape[:2] == (h, w) else None
             for g, c, (t, l, h, w) in zip(gpu, cpu, boxes(cpu))]
    out.update(region_diffs=diffs, region_ok=all(d is not None and d <= TOLERANCE for d in diffs))


def child_dali(out: dict) -> None:
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    nv = load_nvimgcodec()
    data = jpegs()
    cpu = decode(nv, data, [nv.CPU_ONLY])
    bx = boxes(cpu)

    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0)
    def slices():
        raw = fn.external_source(source=lambda: [np.frombuffer(d, dtype=np.uint8) for d in data], batch=True)
        anchors = fn.external_source(source=lambda: [np.array(b[:2], dtype=np.int32) for b in bx], batch=True)
        shapes = fn.external_source(source=lambda: [np.array(b[2:], dtype=np.int32) for b in bx], batch=True)
        return fn.decoders.image_slice(raw, anchors, shapes, axis_names="HW", device="mixed", output_type=types.RGB,
                                       jpeg_fancy_upsampling=True, adjust_orientation=False)
    pipe = slices()
    pipe.build()
    print("dali image_slice: running", flush=True)
    got = pipe.run()[0].as_cpu()
    diffs = [float(np.abs(np.array(got[k]).astype(int) - c[t:t + h, l:l + w].astype(int)).mean())
             for k, (c, (t, l, h, w)) in enumerate(zip(cpu, bx))]
    out.update(dali_slice_diffs=diffs, dali_slice_ok=all(d <= TOLERANCE for d in diffs))


def in_child(what: str, work: Path, cap_s: float) -> dict:
    """Run this script's ``--child what`` under procs.run_capped; its JSON, or how it died."""
    import os
    import procs
    out = work / f"smoke-child-{what}.json"
    out.unlink(missing_ok=True)
    outcome = procs.run_capped([sys.executable, __file__, "--child", what, "--out", str(out)], cap_s, cwd=REPO,
                               env=dict(os.environ), log=work / f"smoke-child-{what}.log",
                               token=f"{os.environ.get(procs.MARKER, 'smoke')}-{what}-{uuid.uuid4().hex[:8]}")
    result = json.loads(out.read_text()) if out.is_file() else {}
    return {"status": outcome.status, "signal": outcome.signal, "seconds": round(outcome.seconds, 1),
            **result, **({} if outcome.status == "ok" else {"tail": outcome.tail})}


def main_smoke(a) -> dict:
    import os
    import numpy as np
    import torch
    t0 = time.monotonic()
    out: dict = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available(),
                 "cpu_cores": os.cpu_count()}
    from feedline.decoders.nvimgcodec_library import load_nvimgcodec
    nv = load_nvimgcodec()   # the carried wheel, against the image's CUDA libraries
    out["nvimgcodec"] = nvimgcodec_version(nv)
    if a.dali:
        import nvidia.dali
        out["dali"] = nvidia.dali.__version__
    data = jpegs()
    cpu = decode(nv, data, [nv.CPU_ONLY])   # what the GPU decode is compared with
    out["cpu_decoded"] = sum(image.ndim == 3 for image in cpu)
    if not out["available"]:
        out["error"] = "torch.cuda.is_available() is False"
        return out
    p = torch.cuda.get_device_properties(0)
    out.update(device=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(),
               capability=list(torch.cuda.get_device_capability(0)), memory_gib=round(p.total_memory / 2**30, 1))
    out["rule"] = region_rule(out["nvimgcodec"], tuple(out["capability"]))
    Path(a.out).write_text(json.dumps(out))   # the device is known even if what follows crashes
    gpu = decode(nv, data, gpu_backends(nv))
    diffs = [float(np.abs(g.astype(int) - c.astype(int)).mean()) if g.shape == c.shape else None
             for g, c in zip(gpu, cpu)]
    out.update(full_decode_diffs=diffs, full_decode_ok=all(d is not None and d <= TOLERANCE for d in diffs))
    Path(a.out).write_text(json.dumps(out))
    out["region"] = in_child("region", Path(a.out).parent, a.child_cap_s)
    if a.dali:
        out["dali_slice"] = in_child("dali", Path(a.out).parent, a.child_cap_s)
    region_ok = out["region"].get("region_ok") is True and out["region"]["status"] == "ok"
    dali_ok = not a.dali or (out["dali_slice"].get("dali_slice_ok") is True and out["dali_slice"]["status"] == "ok")
    out["region_decode_safe"] = region_ok and dali_ok
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def nvimgcodec_version(nv) -> str | None:
    """The version pip installed (the module's own attribute where the metadata is not found)."""
    from importlib import metadata
    try:
        return metadata.version("nvidia-nvimgcodec-cu13")
    except metadata.PackageNotFoundError:
        return getattr(nv, "__version__", None)


def region_rule(version: str | None, capability: tuple[int, int]) -> dict:
    """What feedline's own rule says of GPU region decode here (beside what the child shows)."""
    try:
        from feedline.sources.gpu_region import region_decode_safe
    except ImportError as exc:   # the engines are being reorganized: the probe still runs
        return {"safe": None, "why": f"rule not found: {exc}"}
    return dict(zip(("safe", "why"), region_decode_safe(version, capability)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--dali", action="store_true", help="also import DALI and try its image_slice")
    p.add_argument("--child-cap-s", type=float, default=10.0)
    p.add_argument("--child", choices=("region", "dali"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    out: dict = {}
    try:
        if a.child:
            (child_region if a.child == "region" else child_dali)(out)
        else:
            out = main_smoke(a)
    except Exception as exc:   # said in the JSON: the check reads it
        out["error"] = f"{type(exc).__name__}: {exc}"
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out), flush=True)
    if out.get("available") is False and out.get("cpu_decoded") == BATCH:
        return NO_CUDA   # everything up to the device worked
    return 0 if not out.get("error") else 1


if __name__ == "__main__":
    sys.exit(main())
