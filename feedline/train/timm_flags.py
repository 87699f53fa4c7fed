"""timm's train.py flags that `feedline train` does not take, each answered in one line: a
timm user's flag is either taken with timm's meaning or refused with what to do, never met
with a guess at a flag of another meaning. No torch here: the parser is built from this."""
from __future__ import annotations

NOT_HERE = "not an option of feedline train (timm's; see feedline train --help)"

# timm's flag -> feedline's answer
ANSWERS = {
    "--drop-path": "feedline's ResNets have no stochastic depth (timm's resnet does); leave it out",
    "--drop-connect": "feedline's ResNets have no stochastic depth (timm's resnet does); leave it out",
    "--drop-block": "feedline's ResNets have no DropBlock; leave it out",
    "--drop": "feedline's ResNets have no dropout before the classifier; leave it out",
    "--pin-mem": "FeedLoader pins its batches itself when they go to a GPU; leave it out",
    "--no-prefetcher": "FeedLoader always prepares batches ahead and finishes them on the GPU; leave it out",
    "--sched-on-updates": "feedline steps the schedule after every optimizer step already; leave it out",
    "--log-interval": "--log-every N (optimizer steps between log lines)",
    "--output": "--out DIR (the run's own folder: checkpoint.pt and metrics.jsonl)",
    "--experiment": "--out DIR (the run's own folder: checkpoint.pt and metrics.jsonl)",
    "--recovery-interval": "--save-every N (a checkpoint every N optimizer steps, mid-epoch)",
    "--checkpoint-hist": "feedline keeps one checkpoint.pt, replaced atomically",
    "--torchcompile": "--compile",
    "--input-size": "--size PX (square crops)",
    "--data-dir": "pass TRAIN (a packed .lmdb/.h5 file or an image folder) and --val VAL",
    "--dataset": "pass TRAIN (a packed .lmdb/.h5 file or an image folder) and --val VAL",
    "--train-split": "pass TRAIN (a packed .lmdb/.h5 file or an image folder) and --val VAL",
    "--val-split": "pass TRAIN (a packed .lmdb/.h5 file or an image folder) and --val VAL",
    "--scale": "the trainer crops with torchvision's RandomResizedCrop defaults (scale 0.08-1); FeedLoader "
               "takes others: AugmentSpec(scale=...)",
    "--ratio": "the trainer crops with torchvision's RandomResizedCrop defaults (ratio 3/4-4/3); FeedLoader "
               "takes others: AugmentSpec(ratio=...)",
    "--hflip": "the trainer flips with probability 0.5 (timm's default); FeedLoader: AugmentSpec(flip=False)",
    "--mean": "the trainer normalizes with ImageNet's mean and std; FeedLoader takes others (mean=, std=)",
    "--std": "the trainer normalizes with ImageNet's mean and std; FeedLoader takes others (mean=, std=)",
    "--lr-base": "--lr defaults to 0.1 x global batch / 256 (timm's --lr-base 0.1, --lr-base-size 256); "
                 "pass --lr to set it",
    "--amp-impl": "feedline uses torch's native AMP (--amp, or --autocast)",
    "--grad-accum-steps": "--accum-steps N",
    "--amp VALUE": "--amp-dtype float16|bfloat16 chooses its dtype, or feedline's --autocast bf16|fp16|off "
                   "without --amp",
}

# The rest of timm's train.py flags: refused as NOT_HERE.
OTHERS = """
--train-num-samples --val-num-samples --dataset-download --class-map --input-img-mode --input-key
--target-key --dataset-trust-remote-code --pretrained --pretrained-path --initial-checkpoint
--no-resume-opt --gp --in-chans --interpolation -vb --validation-batch-size --fuser
--grad-checkpointing --fast-norm --model-kwargs --head-init-scale --head-init-bias --torchcompile-mode
--torchscript --model-dtype --no-ddp-bb --synchronize-step --local_rank --device-modules --opt-eps
--opt-betas --layer-decay --opt-kwargs --lr-base-size --lr-base-scale --lr-noise --lr-noise-pct
--lr-noise-std --lr-cycle-mul --lr-cycle-decay --lr-cycle-limit --lr-k-decay --epoch-repeats
--start-epoch --warmup-prefix --patience-epochs --no-aug --train-crop-mode --vflip --color-jitter-prob
--grayscale-prob --gaussian-blur-prob --aug-repeats --aug-splits --jsd-loss --bce-loss --bce-sum
--bce-target-thresh --bce-pos-weight --recount --resplit --cutmix-minmax --mixup-off-epoch
--train-interpolation --bn-momentum --bn-eps --dist-bn --split-bn --model-ema-force-cpu
--model-ema-warmup --worker-seeding --save-images --eval-metric --tta --use-multi-epochs-loader
--log-wandb --wandb-project --wandb-tags --wandb-resume-id
""".split()

UNKNOWN_FLAG_ANSWERS = {**{flag: NOT_HERE for flag in OTHERS}, **ANSWERS}
