"""lstm.py: an LSTM over a sequence of feature vectors: float32 (8, 256) -> float32 (256,), the last hidden state."""
from __future__ import annotations

import torch
from torch import nn

FEATURES = 256


class LSTMModel(nn.Module):
    """A 2-layer LSTM, 256 features in, hidden size 256; the reply is the top layer's hidden state
    after the last step. `small`: 1 layer of hidden size 32, projected to 256 by a Linear layer."""

    def __init__(self, small: bool = False):
        super().__init__()
        hidden, layers = (32, 1) if small else (FEATURES, 2)
        self.lstm = nn.LSTM(FEATURES, hidden, num_layers=layers, batch_first=True)
        self.proj = nn.Linear(hidden, FEATURES) if hidden != FEATURES else nn.Identity()

    def forward(self, seq: torch.Tensor) -> tuple[torch.Tensor]:
        _, (h, _) = self.lstm(seq)  # seq: (B, 8, 256)
        return (self.proj(h[-1]),)
