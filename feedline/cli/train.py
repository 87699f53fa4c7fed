"""`feedline train TRAIN`: the included trainer. Argument parsing only; the work is in
feedline.train. ``python -m feedline.train`` uses the same parser through ``main``."""
from __future__ import annotations

import argparse
import logging
import sys

from ..errors import FeedlineError

DESCRIPTION = (
    "Train a ResNet (or a tiny CNN) on a packed data set or image folder with FeedLoader: one GPU, "
    "the CPU, or several GPUs/nodes with `torchrun --nproc_per_node=N -m feedline.train ...` "
    "(DistributedDataParallel: NCCL on GPUs, gloo on CPUs; only rank 0 logs and saves). "
    "Ends with a short run on synthetic data and prints real/synthetic throughput: the share "
    "of the model's speed the data pipeline delivers.")


def _bool_flag(parser, name: str, default: bool, help: str) -> None:
    parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=default,
                        help=f"{help} (default: {'on' if default else 'off'})")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..train.config import AMP_MODES, ARCHS
    p.add_argument("train", nargs="?", metavar="TRAIN",
                   help="training data: a packed .lmdb/.h5 file or an image folder (optional with --synthetic)")
    p.add_argument("--val", metavar="VAL", help="validation data, same classes as TRAIN: loss, top-1, top-5 each epoch")
    g = p.add_argument_group("model and schedule")
    g.add_argument("--arch", default="resnet50", metavar="|".join(ARCHS),
                   help="resnet18, resnet50 (torchvision's layout, no torchvision needed) or tiny, "
                        "a 4-layer CNN for quick CPU runs (default: resnet50)")
    g.add_argument("--epochs", type=int, default=90, help="default: 90")
    g.add_argument("--batch-size", type=int, default=256,
                   help="images per rank per micro-step; a multiple of 8 suits tensor cores (default: 256)")
    g.add_argument("--accum-steps", type=int, default=1, metavar="N",
                   help="micro-steps per optimizer step (gradient accumulation); DDP all-reduces only "
                        "on the last one (no_sync) (default: 1)")
    g.add_argument("--lr", type=float, default=None,
                   help="peak learning rate (default: 0.1 x global batch / 256, the linear scaling rule)")
    g.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    g.add_argument("--weight-decay", type=float, default=5e-5,
                   help="not applied to BatchNorm parameters and biases (default: 5e-5)")
    g.add_argument("--warmup-epochs", type=float, default=5.0,
                   help="linear warmup, then cosine decay to zero: large batches diverge without "
                        "warmup; capped at a fifth of the run (default: 5)")
    g.add_argument("--label-smoothing", type=float, default=0.1,
                   help="regularizes over-confident logits; +0.3-0.5%% top-1 on ImageNet (default: 0.1)")
    _bool_flag(g, "zero-init-residual", True,
               "start each residual block's last BatchNorm at gamma 0, so blocks start as identity")
    g.add_argument("--size", type=int, default=224, help="training crop and validation size (default: 224)")
    g.add_argument("--num-classes", type=int, default=None,
                   help="classifier width (default: from the data; 1000 with --synthetic and no TRAIN)")
    g = p.add_argument_group("speed")
    g.add_argument("--amp", default="auto", choices=AMP_MODES,
                   help="autocast dtype: bf16 needs no loss scaling, fp16 uses a GradScaler; auto = bf16 "
                        "on GPUs that support it, fp16 on older ones, off on the CPU (default: auto)")
    _bool_flag(g, "channels-last", True,
               "channels_last model and input: cuDNN's fast NHWC convolutions under AMP")
    _bool_flag(g, "compile", False, "torch.compile the model (slow first steps, faster after)")
    _bool_flag(g, "cudnn-benchmark", True,
               "let cuDNN time its algorithms for the fixed input shape (off with --deterministic)")
    _bool_flag(g, "sync-bn", False,
               "SyncBatchNorm across GPUs: for small per-GPU batches (CUDA only)")
    g.add_argument("--threads", default="auto",
                   help="decode threads of the loader (default: auto, the usable CPU cores)")
    g.add_argument("--decoder", default="auto", help="JPEG decoder backend (default: auto, the best one present)")
    g.add_argument("--device", default="auto",
                   help="auto (this rank's GPU if CUDA is usable, else CPU), cuda, cuda:N or cpu")
    g = p.add_argument_group("reports and checkpoints")
    g.add_argument("--out", default="runs/train", metavar="DIR",
                   help="checkpoint.pt and metrics.jsonl go here (default: runs/train)")
    g.add_argument("--log-every", type=int, default=50, metavar="N",
                   help="optimizer steps between log lines; the loss is read back from the device "
                        "only then, so the loop never waits on the GPU (default: 50)")
    g.add_argument("--save-every", type=int, default=0, metavar="N",
                   help="also save a checkpoint every N optimizer steps, mid-epoch (default: 0, per epoch only)")
    g.add_argument("--resume", nargs="?", const="auto", default=None, metavar="CKPT",
                   help="continue exactly where a checkpoint stopped, mid-epoch included "
                        "(default CKPT: DIR/checkpoint.pt)")
    g.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="stop after N optimizer steps and save, as if interrupted; the schedule still "
                        "spans --epochs, so --resume continues the same run")
    _bool_flag(g, "progress", None, "progress bar (default: when stderr is a terminal)")
    g = p.add_argument_group("reproducibility and measurement")
    g.add_argument("--seed", type=int, default=0, help="model init, data order and augmentation (default: 0)")
    _bool_flag(g, "deterministic", False,
               "deterministic kernels, no cuDNN autotuning: bitwise-repeatable runs, somewhat slower")
    g.add_argument("--synthetic", action="store_true",
                   help="train on random tensors already on the device instead of data: the "
                        "model's throughput ceiling")
    g.add_argument("--synthetic-steps", type=int, default=20, metavar="N",
                   help="steps of the synthetic measurement after training (0 skips it) or of a "
                        "--synthetic run (default: 20)")


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train a ResNet with FeedLoader (one GPU, CPU, or torchrun)",
                              description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace):
    from ..train.config import TrainConfig
    return TrainConfig(
        train=args.train, val=args.val, arch=args.arch, epochs=args.epochs, batch_size=args.batch_size,
        lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay,
        warmup_epochs=args.warmup_epochs, label_smoothing=args.label_smoothing, amp=args.amp,
        channels_last=args.channels_last, compile=args.compile, accum_steps=args.accum_steps,
        threads=args.threads, decoder=args.decoder, size=args.size, out=args.out, resume=args.resume,
        seed=args.seed, deterministic=args.deterministic, synthetic=args.synthetic,
        synthetic_steps=args.synthetic_steps, num_classes=args.num_classes, log_every=args.log_every,
        save_every=args.save_every, max_steps=args.max_steps, sync_bn=args.sync_bn, device=args.device,
        cudnn_benchmark=args.cudnn_benchmark, zero_init_residual=args.zero_init_residual,
        progress=args.progress)


def run(args) -> int:
    from ..train import train
    cfg = config_from_args(args)
    result = train(cfg)
    if result.metrics is None:  # not rank 0: rank 0 speaks for the job
        return 0
    if result.history:
        last = result.history[-1]
        line = f"{result.epochs_done} epoch(s), {result.steps} steps, train loss {last['train_loss']:.4f}"
        if "top1" in last:
            line += f", val top-1 {last['top1']:.1%}, top-5 {last['top5']:.1%}"
        print(line)
    elif cfg.synthetic and result.synthetic_images_per_s:
        print(f"synthetic: {result.synthetic_images_per_s:,.0f} images/s per rank")
    if result.pipeline_share is not None:
        print(f"real/synthetic: {result.pipeline_share:.0%} ({result.real_images_per_s:,.0f} vs "
              f"{result.synthetic_images_per_s:,.0f} images/s per rank)")
    if result.stopped_early:
        print(f"stopped at step {result.steps} (--max-steps); continue with --resume")
    if result.checkpoint:
        print(f"checkpoint: {result.checkpoint}")
    print(f"metrics: {result.metrics}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m feedline.train``: the same options, logging and exit codes as `feedline train`."""
    parser = argparse.ArgumentParser(prog="python -m feedline.train", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except FeedlineError as exc:
        print(f"feedline train: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("feedline train: interrupted", file=sys.stderr)
        return 130
