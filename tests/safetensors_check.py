"""Independent reader for files written by Trainyard's safetensors writer.

Parses the format with struct/json/numpy (no Trainyard code), reads it again
with the `safetensors` package, and checks the tensors the
C++ test wrote: each is arange(numel) in its dtype, reshaped (bf16 values
are exact there). Exits non-zero with a message on any mismatch.
"""
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8, "F16": np.float16}


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return header, out


def main(directory):
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        files = sorted(set(index["weight_map"].values()))
        total = 0
    else:
        index, files = None, ["model.safetensors"]
    tensors = {}
    for name in files:
        header, t = read(os.path.join(directory, name))
        if index is not None:
            for key in t:
                assert index["weight_map"][key] == name, f"{key} is in {name}, index says {index['weight_map'][key]}"
                bf16_read_as_f32 = t[key].dtype == np.float32 and header[key]["dtype"] == "BF16"
                total += t[key].size * 2 if bf16_read_as_f32 else t[key].nbytes
        tensors.update(t)
    if index is not None:
        assert index["metadata"]["total_size"] == total, (index["metadata"]["total_size"], total)
    for name, arr in tensors.items():
        expected = np.arange(arr.size).reshape(arr.shape)
        if not np.array_equal(arr.astype(np.float64), expected.astype(np.float64)):
            sys.exit(f"{name}: values differ")
    # The safetensors package, through torch (numpy has no bfloat16), reads
    # the same values.
    import torch
    from safetensors.torch import load_file
    for name in files:
        for key, t in load_file(os.path.join(directory, name)).items():
            if list(t.shape) != list(tensors[key].shape) or \
                    not np.array_equal(t.to(torch.float64).numpy(), tensors[key].astype(np.float64)):
                sys.exit(f"{key}: the safetensors package reads other values")
    print(f"ok: {len(tensors)} tensors in {len(files)} file(s)")


if __name__ == "__main__":
    main(sys.argv[1])
