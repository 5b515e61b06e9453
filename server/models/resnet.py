"""resnet.py: ResNet-18 and ResNet-50 (He et al. 2016) in eval mode: float32 (3, 224, 224) -> float32 (1000,) logits."""
from __future__ import annotations

import torch
from torch import nn

# The last BatchNorm of each residual branch gets this scale on top of its random weight: with
# random running statistics instead of trained ones, the residual stream's variance then grows
# slowly with depth and the logits stay O(1) (a trained network gets this from its training).
RESIDUAL_SCALE = 0.2


def _bn(c: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(c)


class BasicBlock(nn.Module):
    expansion = 1
    last_bn = "bn2"

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2 = nn.Conv2d(width, cout, 3, 1, 1, bias=False)
        self.bn2 = _bn(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + identity)


class Bottleneck(nn.Module):
    expansion = 4
    last_bn = "bn3"

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)  # stride on the 3x3 (ResNet v1.5)
        self.bn2 = _bn(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = _bn(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + identity)


def _downsample(cin: int, cout: int, stride: int):
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _bn(cout))


class ResNet(nn.Module):
    """The ImageNet ResNet: 7x7/2 stem, 3x3/2 max pool, four stages of residual blocks (widths
    base, 2 base, 4 base, 8 base; the first block of stages 2-4 strides 2), global average
    pool, fully connected to 1000 classes. The input is a normalised float32 image."""

    def __init__(self, block, layers: list[int], base: int = 64, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, base, 7, 2, 3, bias=False), _bn(base), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        stages, cin = [], base
        for i, n in enumerate(layers):
            width = base << i
            blocks = []
            for j in range(n):
                blocks.append(block(cin, width, 2 if (i > 0 and j == 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def reset_residual_scale(self) -> None:
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (BasicBlock, Bottleneck)):
                    getattr(m, m.last_bn).weight.mul_(RESIDUAL_SCALE)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor]:
        x = self.stages(self.stem(image))  # image: (B, 3, 224, 224)
        return (self.fc(torch.flatten(self.pool(x), 1)),)


def resnet18(small: bool = False) -> ResNet:
    """ResNet-18: BasicBlocks [2, 2, 2, 2], widths 64-512. `small`: the same depth, widths 8-64."""
    return ResNet(BasicBlock, [2, 2, 2, 2], base=8 if small else 64)


def resnet50(small: bool = False) -> ResNet:
    """ResNet-50: Bottlenecks [3, 4, 6, 3], widths 64-512 (x4 out). `small`: the same depth, widths 8-64."""
    return ResNet(Bottleneck, [3, 4, 6, 3], base=8 if small else 64)
