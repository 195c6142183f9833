"""Transformer blocks written as PyTorch users write them, for the corpus (tests/models/export_corpus.py):
a BERT encoder block, and a GPT-2 decoder block with a KV cache, exported twice: the prefill of a prompt
(it returns the cache) and one decoding step (it reads the cache and returns it one token longer).

Sizes are small (width 64, 4 heads, an MLP of 256, a prompt of 16 tokens) so that the tests stay fast; the
operators are those of the full-sized models.
"""

from __future__ import annotations

import math

import torch
from torch import nn

WIDTH, HEADS, MLP, TOKENS = 64, 4, 256, 16


class Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.causal = causal

    def heads(self, x: torch.Tensor) -> torch.Tensor:   # [B, T, D] -> [B, H, T, D/H]
        b, t, _ = x.shape
        return x.view(b, t, HEADS, WIDTH // HEADS).transpose(1, 2)

    def forward(self, x, past_k=None, past_v=None):
        q, k, v = (self.heads(part) for part in self.qkv(x).split(WIDTH, dim=-1))
        if past_k is not None:
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(WIDTH // HEADS)
        if self.causal and past_k is None:   # a prompt attends to the tokens before each
            t = x.shape[1]
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
            scores = scores.masked_fill(mask, float("-inf"))
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(x.shape)
        return self.out(y), k, v


class BertBlock(nn.Module):
    """Post-norm: attention, add, layer norm; MLP (GELU), add, layer norm."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = Attention(causal=False)
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, MLP), nn.GELU(), nn.Linear(MLP, WIDTH))

    def forward(self, x):
        x = self.norm1(x + self.attention(x)[0])
        return self.norm2(x + self.mlp(x))


class Gpt2Block(nn.Module):
    """Pre-norm: layer norm, causal attention (with the cache), add; layer norm, MLP (tanh GELU), add."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = Attention(causal=True)
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, MLP), nn.GELU(approximate="tanh"), nn.Linear(MLP, WIDTH))

    def forward(self, x, past_k=None, past_v=None):
        a, k, v = self.attention(self.norm1(x), past_k, past_v)
        x = x + a
        return x + self.mlp(self.norm2(x)), k, v


class Decode(nn.Module):
    """One decoding step of a Gpt2Block: the new token and the cache of the tokens before it."""

    def __init__(self, block: Gpt2Block) -> None:
        super().__init__()
        self.block = block

    def forward(self, x, past_k, past_v):
        return self.block(x, past_k, past_v)


def build(name: str, batch: int = 1):
    """The block ``name`` ("bert_block", "gpt2_prefill", "gpt2_decode") in eval mode and its example
    inputs of ``batch``."""
    torch.manual_seed(0)
    if name == "bert_block":
        return BertBlock().eval(), (torch.randn(batch, TOKENS, WIDTH),)
    block = Gpt2Block().eval()
    if name == "gpt2_prefill":
        return block, (torch.randn(batch, TOKENS, WIDTH),)
    cache = torch.randn(batch, HEADS, TOKENS, WIDTH // HEADS)
    return Decode(block).eval(), (torch.randn(batch, 1, WIDTH), cache, cache.clone())
