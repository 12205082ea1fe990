"""Makes what examples/llama-finetune.yaml starts from, with the venv's
transformers (no download: the model is random): a small Llama directory
as Hugging Face writes one (config.json + model.safetensors) and a stream
of token ids to fine-tune it on.

    .venv/bin/python examples/make_llama_inputs.py llama-inputs [--vocab N] [--layers N] [--hidden N]

The tokens follow a rule a model can learn (each id is an affine function
of the one before, with 10% noise), written as numpy writes a .bin token
file: uint16 when the vocabulary fits, uint32 otherwise (say so in the
spec's data.token_dtype). A real corpus tokenized into such files, or a
directory of .bin shards, is read the same way.
"""
import argparse
import os

import numpy as np
import torch
import transformers

transformers.utils.logging.disable_progress_bar()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=400_000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    torch.manual_seed(a.seed)
    config = transformers.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.hidden * 8 // 3,
                                      num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                      num_key_value_heads=a.kv_heads, max_position_embeddings=1024,
                                      rope_theta=10000.0, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(os.path.join(a.out, "model"))

    rng = np.random.default_rng(a.seed)
    ids = np.empty(a.tokens, dtype=np.int64)
    ids[0] = 1
    noise = rng.random(a.tokens) < 0.1
    random_ids = rng.integers(0, a.vocab, a.tokens)
    for i in range(1, a.tokens):
        ids[i] = random_ids[i] if noise[i] else (5 * ids[i - 1] + 3) % a.vocab
    dtype = np.uint16 if a.vocab <= 1 << 16 else np.uint32
    ids.astype(dtype).tofile(os.path.join(a.out, "tokens.bin"))
    print(f"{a.out}/model: {sum(p.numel() for p in model.parameters()):,} parameters; "
          f"{a.out}/tokens.bin: {a.tokens:,} {np.dtype(dtype).name} tokens")


if __name__ == "__main__":
    main()
