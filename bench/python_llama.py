"""Python peer for bench/llama: transformers' LlamaForCausalLM of the same
config.json (SDPA attention, as transformers runs it by default) trained
with a plain PyTorch loop — one process, or FSDP2 (`fully_shard` on every
LlamaDecoderLayer, then the root with FSDP2's defaults) over Gloo — AdamW
with the same learning rate and weight decay (0) as bench/llama's ranks,
1 thread per process, the venv's torch. `--checkpointing`: transformers'
gradient_checkpointing_enable() (recomputes each decoder layer in
backward).

On a GPU (`--device cuda`, bench/gpu): the model is built on the GPU,
`--bf16` runs forward and loss under torch.autocast(bfloat16) with fp32
weights (as Trainyard's mixed_precision: bf16), `--fused` and `--foreach`
pick AdamW's implementation (PyTorch's default on CUDA is foreach; fused is
its fastest documented path), `--compile` wraps the model in
torch.compile (Inductor's default mode; the warm-up steps compile it),
FSDP2 groups over NCCL, and the memory reported is
torch.cuda.max_memory_allocated.

Started once per rank by bench/llama with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment. Rank 0 prints one JSON line: per-step
seconds (forward, backward, optimizer step) and the peak resident memory of
the process (ru_maxrss).
"""
import argparse
import json
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import transformers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config", help="directory holding config.json")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--checkpointing", action="store_true")
    p.add_argument("--foreach", action="store_true", help="AdamW(foreach=True)")
    p.add_argument("--fused", action="store_true", help="AdamW(fused=True)")
    p.add_argument("--compile", action="store_true", help="torch.compile(model)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16) around forward and loss")
    a = p.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    torch.set_flush_denormal(True)  # as trainyard-worker does (bench_util.h)
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device(a.device)
    if a.device == "cuda":
        torch.cuda.set_device(0)
    if a.fsdp:
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo", rank=rank,
                                world_size=int(os.environ["WORLD_SIZE"]))
    torch.manual_seed(42)
    config = transformers.LlamaConfig.from_pretrained(a.config)
    config._attn_implementation = "sdpa"
    with device:
        model = transformers.LlamaForCausalLM(config).train()
    if a.checkpointing:
        model.gradient_checkpointing_enable()
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    if a.compile:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, foreach=True if a.foreach else None,
                            fused=True if a.fused else None)
    g = torch.Generator().manual_seed(1000 + rank)
    tokens = torch.randint(0, config.vocab_size, (a.batch, a.context + 1), generator=g).to(device)
    x, y = tokens[:, :-1], tokens[:, 1:]
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.bf16):
            logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, config.vocab_size).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    if a.fsdp:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        device_peak = torch.cuda.max_memory_allocated() if a.device == "cuda" else 0
        print(json.dumps({"seconds": times, "peak_rss_bytes": peak, "device_peak_bytes": device_peak,
                          "parameters": sum(p.numel() for p in model.parameters())}), flush=True)


if __name__ == "__main__":
    main()
