"""lenet.py: LeNet-5 for 28x28 grey images: uint8 (1, 28, 28) -> float32 (10,) logits."""
from __future__ import annotations

import torch
from torch import nn

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


class LeNet(nn.Module):
    """LeNet-5 (LeCun et al. 1998) with ReLU and max pooling: conv 5x5 (6) -> pool -> conv 5x5 (16)
    -> pool -> 120 -> 84 -> 10. The uint8 pixels are scaled to [0, 1] and normalised with MNIST's
    mean and standard deviation. `small` is the same network: it is small already."""

    def __init__(self, small: bool = False):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10),
        )

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor]:
        x = (image.to(torch.float32) * (1.0 / 255.0) - MNIST_MEAN) * (1.0 / MNIST_STD)  # (B, 1, 28, 28) uint8
        return (self.classifier(self.features(x)),)
