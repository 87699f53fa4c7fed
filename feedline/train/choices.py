"""The trainer's own option choices, as ``feedline.core.choices.Choice`` Enums (strings too).

The loader's choices (Engine, OnError, Order) live in feedline.core.choices. No torch
here: the command line builds its parser from these.
"""
from __future__ import annotations

from ..core.choices import Choice


class Arch(Choice):
    """The model to train."""

    RESNET18 = "resnet18"
    RESNET50 = "resnet50"
    TINY = "tiny"              # four conv layers: seconds per epoch on a CPU, for tests and demos


class Autocast(Choice):
    """Autocast dtype of the forward pass (feedline's --autocast; timm's --amp picks fp16 or bf16)."""

    AUTO = "auto"              # bf16 on GPUs that have it, fp16 on older ones, off on the CPU
    BF16 = "bf16"              # float32's range: no loss scaling
    FP16 = "fp16"              # with a GradScaler
    OFF = "off"                # full float32


Amp = Autocast   # the name before timm's --amp switch took the flag


class AmpDtype(Choice):
    """timm's --amp-dtype: the dtype of its --amp switch."""

    FLOAT16 = "float16"        # with a GradScaler (timm's default)
    BFLOAT16 = "bfloat16"


class TaskChoice(Choice):
    """What a run learns (``--task``), named by the field kinds' ``task`` (`feedline.fields`)."""

    AUTO = "auto"              # the store's one field a model can learn; refused when it has several
    CLASSIFY = "classify"      # label: one class per image, cross-entropy
    MULTILABEL = "multilabel"  # labels: several classes per image, binary cross-entropy
    REGRESS = "regress"        # target: numbers, MSE or smooth L1
    SEGMENT = "segment"        # mask: a class per pixel, cross-entropy without the ignore_index pixels


class RegressionLoss(Choice):
    """The loss of a run that learns a store's ``target`` numbers."""

    MSE = "mse"                # mean squared error
    SMOOTH_L1 = "smooth-l1"    # Huber with beta 1: less pulled by outliers


class Device(Choice):
    """Where the model runs; ``cuda:N`` names one GPU (see ``parse_device``)."""

    AUTO = "auto"              # this rank's GPU when CUDA is usable, else the CPU
    CUDA = "cuda"              # this rank's GPU: LOCAL_RANK modulo the GPU count
    CPU = "cpu"


def parse_device(value: str, option: str = "--device") -> str:
    """``auto``, ``cuda``, ``cuda:N`` or ``cpu`` (any case); ValueError names them otherwise."""
    text = str(value).strip().lower()
    kind, sep, index = text.partition(":")
    if sep and kind == Device.CUDA.value and index.isdigit():
        return f"cuda:{int(index)}"
    if sep:
        raise ValueError(f"{option} must be auto, cuda, cuda:N or cpu, got {value!r}")
    try:
        return Device(kind).value
    except ValueError:
        raise ValueError(f"{option} must be auto, cuda, cuda:N or cpu, got {value!r}") from None


class Opt(Choice):
    """The optimizer (timm's --opt names, with timm's meaning)."""

    SGD = "sgd"                # SGD with Nesterov momentum (timm's sgd)
    MOMENTUM = "momentum"      # SGD with classical momentum, no Nesterov (timm's; torchvision's reference recipe)
    ADAM = "adam"              # torch.optim.Adam (weight decay as an L2 term, as timm's adam)
    ADAMW = "adamw"            # torch.optim.AdamW
    LAMB = "lamb"              # timm's Lamb: Adam moments, a layer-wise trust ratio, global grad clip 1.0


class Sched(Choice):
    """The learning-rate schedule after the linear warmup (timm's --sched names)."""

    COSINE = "cosine"          # cosine decay to --min-lr over --epochs (then --cooldown-epochs at --min-lr)
    STEP = "step"              # times --decay-rate every --decay-epochs
    MULTISTEP = "multistep"    # times --decay-rate at each of --decay-milestones (epochs)


class ClipMode(Choice):
    """How --clip-grad clips (timm's --clip-mode; its agc is not offered)."""

    NORM = "norm"              # the global L2 norm of all gradients at most --clip-grad
    VALUE = "value"            # each gradient element within [-clip, clip]
