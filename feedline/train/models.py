"""The trainer's models: ResNet-18/50 (torchvision's layout, no torchvision) and a tiny CNN;
for segmentation (``--task segment``) the same backbones under a small FCN head.

Convolutions before a BatchNorm carry no bias (the BN shift replaces it). With
``zero_init_residual`` the last BN of each residual block starts at gamma = 0, so
every block starts as the identity (Goyal et al., 2017), which helps large batches.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .choices import Arch
from .config import TrainError


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv3x3(cin, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """ResNet v1.5: the stride sits on the 3x3 convolution, as torchvision and NVIDIA do."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv1x1(cin, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, width * self.expansion)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers: list[int], num_classes: int = 1000,
                 zero_init_residual: bool = True):
        super().__init__()
        self.cin = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._stage(block, 64, layers[0], 1)
        self.layer2 = self._stage(block, 128, layers[1], 2)
        self.layer3 = self._stage(block, 256, layers[2], 2)
        self.layer4 = self._stage(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        _init_weights(self)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, (BasicBlock, Bottleneck)):
                    nn.init.zeros_(m.last_bn().weight)

    def _stage(self, block, width: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.cin != width * block.expansion:
            downsample = nn.Sequential(_conv1x1(self.cin, width * block.expansion, stride),
                                       nn.BatchNorm2d(width * block.expansion))
        layers = [block(self.cin, width, stride, downsample)]
        self.cin = width * block.expansion
        layers += [block(self.cin, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage's maps (stride 32): what the classifier pools."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(self.features(x)), 1))


class TinyNet(nn.Module):
    """Four strided conv-BN-ReLU layers and a linear head: seconds per epoch on a CPU."""

    def __init__(self, num_classes: int = 1000, zero_init_residual: bool = True):
        super().__init__()
        del zero_init_residual  # no residual blocks; accepted so every builder takes the same options
        chans = [3, 16, 32, 64, 128]
        layers: list[nn.Module] = []
        for cin, cout in zip(chans, chans[1:]):
            layers += [_conv3x3(cin, cout, 2), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(chans[-1], num_classes)
        _init_weights(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(self.features(x)), 1))


class FCN(nn.Module):
    """A backbone's last maps under torchvision's FCNHead (3x3 conv to a quarter of the channels,
    BN, ReLU, dropout 0.1, 1x1 conv to the classes), upsampled bilinearly to the input: (N, C, H, W).
    The backbone's classifier is left out of it."""

    def __init__(self, backbone: nn.Module, channels: int, num_classes: int):
        super().__init__()
        self.backbone = backbone
        inner = channels // 4
        self.head = nn.Sequential(_conv3x3(channels, inner), nn.BatchNorm2d(inner), nn.ReLU(inplace=True),
                                  nn.Dropout(0.1), nn.Conv2d(inner, num_classes, 1))
        _init_weights(self.head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        maps = self.backbone.features(x)
        return F.interpolate(self.head(maps), size=x.shape[-2:], mode="bilinear", align_corners=False)


def fcn(backbone: nn.Module, num_classes: int) -> FCN:
    """``backbone`` (ResNet or TinyNet) under an FCN head; its classifier dropped."""
    channels = backbone.fc.in_features
    backbone.fc = nn.Identity()
    return FCN(backbone, channels, num_classes)


def _init_weights(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def resnet18(num_classes: int = 1000, zero_init_residual: bool = True) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes, zero_init_residual)


def resnet50(num_classes: int = 1000, zero_init_residual: bool = True) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes, zero_init_residual)


def tiny(num_classes: int = 1000, zero_init_residual: bool = True) -> TinyNet:
    return TinyNet(num_classes, zero_init_residual)


MODELS: dict[Arch, Callable[..., nn.Module]] = {Arch.RESNET18: resnet18, Arch.RESNET50: resnet50,
                                               Arch.TINY: tiny}


def build_model(name: str | Arch, num_classes: int = 1000, zero_init_residual: bool = True,
                segment: bool = False) -> nn.Module:
    """A freshly initialized model by name (``segment``: under an FCN head, one score per class
    and pixel); TrainError names the choices for an unknown one."""
    try:
        builder = MODELS[Arch.parse(name, "architecture")]
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    if num_classes < 1:
        raise TrainError(f"a model needs at least one class, got num_classes={num_classes}")
    model = builder(num_classes=num_classes, zero_init_residual=zero_init_residual)
    return fcn(model, num_classes) if segment else model
