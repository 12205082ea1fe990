"""Python peer for bench/fsdp: the worker's GPT (token + position embeddings,
pre-LayerNorm blocks with causal attention written as softmax(QK^T/sqrt(d))V
and a GELU MLP, final LayerNorm, head tied to the token embedding) trained
with PyTorch's FSDP2 as its own examples apply it (`fully_shard` on every
Block, then `fully_shard(model)` on the root with FSDP2's defaults: the
Blocks reshard after forward, FULL_SHARD; the root keeps its parameters
gathered until backward, as Trainyard's root unit does) over Gloo, AdamW
with the same learning rate and weight decay (0) as bench/fsdp's ranks —
its default per-parameter loop, or `--foreach` — 1 thread per process, the
venv's torch.

Started once per rank by bench/fsdp with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment. Rank 0 prints one JSON line: per-step
seconds, and the bytes this rank holds after its last optimizer step in
parameters, gradients and optimizer state, counted as the worker counts them
(each storage once; for FSDP2's DTensors, the local shards).
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.attn_c_attn = nn.Linear(width, 3 * width)
        self.attn_c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp_c_fc = nn.Linear(width, 4 * width)
        self.mlp_c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.attn_c_attn(self.ln_1(x)).split(c, 2)
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), -1)
        y = torch.matmul(att, v).transpose(1, 2).contiguous().view(b, t, c)
        h = x + self.attn_c_proj(y)
        return h + self.mlp_c_proj(F.gelu(self.mlp_c_fc(self.ln_2(h))))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, context, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1])).unsqueeze(0)
        for block in self.h:
            x = block(x)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())


def held_bytes(model, opt):
    seen, sizes = set(), {"param": 0, "grad": 0, "optimizer": 0}

    def count(kind, t):
        if t is None:
            return
        t = t.to_local() if hasattr(t, "to_local") else t
        key = t.untyped_storage().data_ptr()
        if key in seen or t.untyped_storage().nbytes() == 0:
            return
        seen.add(key)
        sizes[kind] += t.untyped_storage().nbytes()

    for p in model.parameters():
        count("param", p)
    for p in model.parameters():
        count("grad", p.grad)
    for state in opt.state.values():
        for name in ("exp_avg", "exp_avg_sq"):
            count("optimizer", state.get(name))
    return sizes


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--foreach", action="store_true", help="AdamW(foreach=True): one kernel per state tensor list")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as trainyard-worker does (bench_util.h)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    torch.manual_seed(42)
    model = Gpt(a.layers, a.width, a.heads, a.context, a.vocab)
    for block in model.h:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, foreach=True if a.foreach else None)
    g = torch.Generator().manual_seed(1000 + rank)
    tokens = torch.randint(0, a.vocab, (a.batch, a.context + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    times, sizes = [], None
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        if step == a.warmup + a.steps - 1:
            sizes = held_bytes(model, opt)  # steady state: after the step, before gradients are released
        opt.zero_grad(set_to_none=True)
        loss.item()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"seconds": times, "param_bytes": sizes["param"], "grad_bytes": sizes["grad"],
                          "optimizer_bytes": sizes["optimizer"]}), flush=True)


if __name__ == "__main__":
    main()
