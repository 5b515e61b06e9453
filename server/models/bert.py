"""bert.py: a BERT-shaped encoder with a SQuAD-style span head: 6152 B (ids, segments, length) -> 2056 B.

Request (6152 B): input_ids int64 (384,), segment_ids int64 (384,), valid_length int64 (1,).
Reply (2056 B): logits float32 (2, 256) (start and end logits of the first 256 positions),
best_span int64 (1,) = start * 1024 + end of the best answer span.

Untrusted integers are made safe before any lookup: ids are taken modulo the vocabulary
(Python-style, so negative ids are fine too), segment ids clamped to 0..1, the valid length
clamped to 1..384. Keys at positions >= valid length are masked out of the attention. The best
span maximises start_logit[s] + end_logit[e] over s <= e < min(valid length, 256) and
e - s < MAX_ANSWER (SQuAD's post-processing); ties go to the lowest s * 256 + e.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

SEQ = 384        # tokens per request
SPAN = 256       # positions with start/end logits in the reply
SPAN_PACK = 1024  # best_span = start * SPAN_PACK + end
MAX_ANSWER = 30  # longest answer span, in tokens


@dataclass(frozen=True)
class BertConfig:
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    ffn: int = 1024
    vocab: int = 30522
    max_positions: int = 512
    segments: int = 2


DEFAULT = BertConfig()                                   # "BERT-like": 4 layers, hidden 256, 4 heads
SMALL = BertConfig(layers=2, hidden=64, heads=2, ffn=128)  # the fast CPU test configuration
BASE = BertConfig(layers=12, hidden=768, heads=12, ffn=3072)  # BERT-base's shape, for those with a GPU


class EncoderLayer(nn.Module):
    """Post-LN transformer layer as in BERT: self-attention + residual + LayerNorm, GELU FFN + residual + LayerNorm."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.hidden)
        self.ln1 = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.ffn_in = nn.Linear(cfg.hidden, cfg.ffn)
        self.ffn_out = nn.Linear(cfg.ffn, cfg.hidden)
        self.ln2 = nn.LayerNorm(cfg.hidden, eps=1e-12)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # keep: (B, 1, 1, n), True = attend
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, n, d)))
        return self.ln2(x + self.ffn_out(F.gelu(self.ffn_in(x))))


class BertLike(nn.Module):
    """Embeddings (word + position + segment, LayerNorm), `layers` encoder layers, and a
    Linear(hidden, 2) start/end head. Default config: 4 layers, hidden 256, 4 heads, FFN 1024,
    vocabulary 30522 (BERT's); `small`: 2 layers, hidden 64, 2 heads, FFN 128, same vocabulary."""

    def __init__(self, small: bool = False, config: BertConfig | None = None):
        super().__init__()
        cfg = self.config = config or (SMALL if small else DEFAULT)
        self.word = nn.Embedding(cfg.vocab, cfg.hidden)
        self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
        self.segment = nn.Embedding(cfg.segments, cfg.hidden)
        self.ln = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))
        self.qa = nn.Linear(cfg.hidden, 2)
        pos = torch.arange(SPAN)
        # allowed[s, e]: s <= e and e - s < MAX_ANSWER
        self.register_buffer("allowed", (pos[None, :] >= pos[:, None]) & (pos[None, :] - pos[:, None] < MAX_ANSWER),
                             persistent=False)

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor, valid_length: torch.Tensor):
        cfg = self.config
        n = input_ids.shape[1]
        ids = torch.remainder(input_ids, cfg.vocab)                        # any int64 is a valid id
        seg = segment_ids.clamp(0, cfg.segments - 1)
        valid = valid_length.reshape(-1).clamp(1, n)                       # (B,)
        pos = torch.arange(n, device=input_ids.device)
        x = self.ln(self.word(ids) + self.position(pos)[None] + self.segment(seg))
        keep = (pos[None, :] < valid[:, None])[:, None, None, :]          # (B, 1, 1, n)
        for layer in self.layers:
            x = layer(x, keep)
        logits = self.qa(x[:, :SPAN]).transpose(1, 2)                     # (B, 2, SPAN): start, end
        return logits.contiguous(), best_span(logits, valid, self.allowed)


def best_span(logits: torch.Tensor, valid: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """(B, 1) int64 start * SPAN_PACK + end of the highest-scoring allowed span ending before `valid`."""
    start, end = logits[:, 0], logits[:, 1]                                # (B, SPAN) each
    scores = start[:, :, None] + end[:, None, :]                           # (B, s, e)
    pos = torch.arange(SPAN, device=logits.device)
    ok = allowed[None] & (pos[None, None, :] < valid[:, None, None])       # e < valid (so s < valid)
    idx = scores.masked_fill(~ok, float("-inf")).flatten(1).argmax(1)
    return ((idx // SPAN) * SPAN_PACK + idx % SPAN)[:, None]
