"""Peer and helper for bench/image_loader.

  python_image_loader.py make DIR png32|jpeg256 N
      writes an ImageFolder tree of N images in 4 classes: 32x32 PNGs or
      256x256 JPEGs (quality 90) of smooth noise, with Pillow.
  python_image_loader.py decode DIR --size S --resize R --batches B [--batch-size 32]
      PyTorch's DataLoader with one worker process over DIR, each sample
      transformed as torchvision does on PIL images (torchvision is not in
      the venv; these are the calls it makes): open().convert("RGB"),
      Resize(R) (PIL bilinear), RandomCrop(S), RandomHorizontalFlip,
      ToTensor, Normalize. Prints one JSON line: images/s of the worker,
      timed from the end of the first batch (worker start-up and its first
      batch excluded) to the end of the last.
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np
import torch
from PIL import Image

MEAN = torch.tensor([0.5, 0.5, 0.5])[:, None, None]
STD = torch.tensor([0.25, 0.25, 0.25])[:, None, None]


def make(out, kind, n):
    rng = np.random.default_rng(0)
    side = 32 if kind == "png32" else 256
    for i in range(n):
        d = os.path.join(out, f"class{i % 4}")
        os.makedirs(d, exist_ok=True)
        base = rng.normal(128, 40, (side // 8 + 1, side // 8 + 1, 3)).clip(0, 255).astype(np.uint8)
        img = Image.fromarray(base).resize((side, side), Image.BILINEAR)
        noisy = (np.asarray(img, dtype=np.int16) + rng.integers(-12, 12, (side, side, 3))).clip(0, 255)
        img = Image.fromarray(noisy.astype(np.uint8))
        if kind == "png32":
            img.save(os.path.join(d, f"{i:06d}.png"))
        else:
            img.save(os.path.join(d, f"{i:06d}.jpg"), quality=90)


class Folder(torch.utils.data.Dataset):
    def __init__(self, root, size, resize):
        self.files = []
        for label, c in enumerate(sorted(os.listdir(root))):
            for f in sorted(os.listdir(os.path.join(root, c))):
                self.files.append((os.path.join(root, c, f), label))
        self.size, self.resize = size, resize

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        img = Image.open(path).convert("RGB")
        w, h = img.size
        if min(w, h) != self.resize:
            short, long = (w, h) if w <= h else (h, w)
            new_long = int(self.resize * long / short)
            img = img.resize((self.resize, new_long) if w <= h else (new_long, self.resize), Image.BILINEAR)
        w, h = img.size
        top, left = random.randint(0, h - self.size), random.randint(0, w - self.size)
        img = img.crop((left, top, left + self.size, top + self.size))
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255)
        return (x - MEAN) / STD, label


def decode(a):
    torch.set_num_threads(1)
    data = Folder(a.dir, a.size, a.resize)
    sampler = torch.utils.data.RandomSampler(data, replacement=True, num_samples=a.batch_size * (a.batches + 1))
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch_size, sampler=sampler, num_workers=1,
                                         prefetch_factor=2, worker_init_fn=lambda _: torch.set_num_threads(1))
    it = iter(loader)
    next(it)
    start = time.perf_counter()
    n = 0
    for x, _ in it:
        n += x.shape[0]
    seconds = time.perf_counter() - start
    print(json.dumps({"images": n, "seconds": seconds, "images_per_second": n / seconds}))


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("dir")
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--resize", type=int, required=True)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    decode(p.parse_args())


if __name__ == "__main__":
    main()
