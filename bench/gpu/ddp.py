"""ddp: under `torchrun --nproc_per_node=N` (N: the GPUs present, --nproc), NCCL starts, DDP trains and
a checkpoint is written and read back; then `feedline train` does the same under torchrun.

    python bench/gpu/ddp.py --data photos.lmdb --out ddp.json

Two runs, each a subprocess of `python -m torch.distributed.run --standalone
--nproc_per_node=N`: this file with --probe (init_process_group("nccl"), a DDP-wrapped
model, a few steps, an all-reduce whose result is known, torch.save / torch.load), and
`-m feedline.train` (a few ResNet-18 steps, --save-every, its checkpoint loaded back).
With --cpu-smoke both run on the CPU with gloo.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # `python bench/gpu/ddp.py`: the repository root on sys.path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common import say, write_results  # noqa: E402
from bench.gpu import common  # noqa: E402

NAME = "ddp"


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


def probe(out: Path, cpu: bool) -> dict:
    """Inside torchrun: NCCL (gloo on the CPU) process group, DDP steps, checkpoint round trip."""
    import torch
    import torch.distributed as dist
    from torch import nn
    backend = "gloo" if cpu else "nccl"
    device = torch.device("cpu") if cpu else torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if not cpu:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, **({} if cpu else {"device_id": device}))
    try:
        model = nn.parallel.DistributedDataParallel(
            nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).to(device),
            device_ids=None if cpu else [device.index])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(0)
        losses = []
        for _ in range(5):
            x, y = torch.randn(32, 64, generator=gen).to(device), torch.randint(0, 10, (32,), generator=gen).to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        ones = torch.ones(4, device=device)
        dist.all_reduce(ones)
        path = out / "probe-checkpoint.pt"
        torch.save({"model": model.module.state_dict(), "step": 5}, path)
        state = torch.load(path, map_location=device, weights_only=True)
        same = all(torch.equal(state["model"][k], v) for k, v in model.module.state_dict().items())
        return {"backend": dist.get_backend(), "world_size": dist.get_world_size(), "losses": losses,
                "all_reduce_ok": bool(torch.equal(ones, torch.full_like(ones, dist.get_world_size()))),
                "checkpoint": str(path), "checkpoint_round_trip": same}
    finally:
        dist.destroy_process_group()


def run_torchrun(args_tail: list[str], timeout: float, nproc: int) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = common.run_for(torchrun(nproc) + args_tail, timeout)
    return proc.returncode, (proc.stdout + proc.stderr)[-3000:], time.perf_counter() - t0


def trainer_check(args, work: Path) -> dict:
    run_dir = work / "train"
    tail = ["-m", "feedline.train", args.data, "--arch", "tiny" if args.cpu_smoke else "resnet18",
            "--batch-size", str(args.batch_size), "--epochs", "1", "--max-steps", "6", "--save-every", "3",
            "--threads", str(args.threads), "--decoder", common.cpu_decoder(), "--synthetic-steps", "0",
            "--out", str(run_dir), "--no-progress",
            "--size", "32" if args.cpu_smoke else "224", "--device", "cpu" if args.cpu_smoke else "cuda"]
    rc, output, seconds = run_torchrun(tail, args.timeout, args.nproc)
    result = {"returncode": rc, "seconds": seconds, "command": " ".join(torchrun(args.nproc) + tail)}
    metrics = run_dir / "metrics.jsonl"
    events = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.is_file() else []
    start = next((e for e in events if e.get("event") == "start"), {})
    result.update(world_size=start.get("world_size"), steps=sum(e.get("event") == "step" for e in events) or None,
                  checkpoints=[e.get("path") for e in events if e.get("event") == "checkpoint"])
    ckpt = run_dir / "checkpoint.pt"
    if ckpt.is_file():
        import torch
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        result["checkpoint_step"] = state.get("progress", {}).get("step")
    result["ok"] = rc == 0 and bool(result["checkpoints"]) and result.get("checkpoint_step") is not None
    if rc != 0:
        result["output"] = output
    return result


def run(args) -> dict:
    work = Path(args.out).with_name(Path(args.out).stem + "-run")
    work.mkdir(parents=True, exist_ok=True)
    tail = [str(Path(__file__).resolve()), "--probe", "--out", str(work / "probe.json")] + (
        ["--cpu-smoke"] if args.cpu_smoke else [])
    rc, output, seconds = run_torchrun(tail, args.timeout, args.nproc)
    probe_result = json.loads((work / "probe.json").read_text()) if rc == 0 else {"output": output}
    probe_result.update(returncode=rc, seconds=seconds)
    probe_result["ok"] = rc == 0 and probe_result.get("all_reduce_ok") and probe_result.get("checkpoint_round_trip")
    trainer = trainer_check(args, work)
    say(f"{NAME}: torchrun + {probe_result.get('backend', '?')} probe: {'ok' if probe_result['ok'] else 'FAILED'}; "
        f"feedline train under torchrun: {'ok' if trainer['ok'] else 'FAILED'} "
        f"(world size {trainer.get('world_size')}, checkpoints {len(trainer.get('checkpoints') or [])})")
    for what, result in (("probe", probe_result), ("trainer", trainer)):
        if not result["ok"]:
            say(f"{what} output:\n{result.get('output', '')}")
    path = write_results(NAME, [], {k: v for k, v in vars(args).items() if k != "out"} | {"gpu": common.gpu_name()},
                         args.out, probe=probe_result, trainer=trainer,
                         ddp_ok=bool(probe_result["ok"] and trainer["ok"]))
    say(f"wrote {path}")
    return {"path": str(path), "ok": probe_result["ok"] and trainer["ok"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="packed .lmdb of the photos (not needed with --probe)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--nproc", type=int, help="ranks, one per GPU (default: every GPU present; 1 with --cpu-smoke)")
    p.add_argument("--cpu-smoke", action="store_true", help="gloo on the CPU, a tiny model: proves the script works")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # the part torchrun starts
    args = p.parse_args(argv)
    common.positive(p, args, "threads", "batch_size", "nproc")
    if args.cpu_smoke:
        args.threads, args.batch_size = 2, 8
    if args.probe:
        result = probe(Path(args.out).parent, args.cpu_smoke)
        if int(os.environ.get("RANK", 0)) == 0:   # one writer
            Path(args.out).write_text(json.dumps(result))
        return 0
    if args.nproc is None:
        import torch
        args.nproc = 1 if args.cpu_smoke else max(1, torch.cuda.device_count())
    if not args.data:
        p.error("--data is required")
    if not args.cpu_smoke:
        common.device_for(args)
    return 0 if run(args)["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
