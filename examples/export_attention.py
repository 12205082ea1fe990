"""Exports a small attention classifier for `model: {kind: "torchscript:PATH"}`.

    .venv/bin/python examples/export_attention.py attention.pt     # then: trainctl submit examples/attention.yaml

The module reads a [B, 784] batch (MNIST-shaped, as synthetic and mnist data
give it) as 16 tokens of 49 features, and uses what current PyTorch models
use: F.scaled_dot_product_attention, LayerNorm, GELU, and a registered buffer
(the positional table). Scripted by the same torch release the worker is
built against, it trains from C++; the FULL checkpoint's model.safetensors
loads back with module.load_state_dict.
"""
import sys

import torch
import torch.nn.functional as F


class Attention(torch.nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.out = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class AttentionClassifier(torch.nn.Module):
    def __init__(self, tokens: int = 16, features: int = 49, dim: int = 32, heads: int = 4, classes: int = 10):
        super().__init__()
        self.tokens = tokens
        self.features = features
        self.embed = torch.nn.Linear(features, dim)
        # A fixed sinusoidal table: a buffer, saved with the weights, not trained.
        position = torch.arange(tokens, dtype=torch.float32).unsqueeze(1)
        freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-4.0 / dim))
        table = torch.zeros(tokens, dim)
        table[:, 0::2] = torch.sin(position * freq)
        table[:, 1::2] = torch.cos(position * freq)
        self.register_buffer("position", table)
        self.block1 = Block(dim, heads)
        self.block2 = Block(dim, heads)
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(x.shape[0], self.tokens, self.features)
        x = self.embed(x) + self.position
        x = self.block2(self.block1(x))
        return self.head(self.ln(x).mean(dim=1))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.jit.script(AttentionClassifier()).save(sys.argv[1] if len(sys.argv) > 1 else "attention.pt")
