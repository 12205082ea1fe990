"""Makes a small image folder for examples/image-folder.yaml, in
torchvision's ImageFolder layout: DIR/<class>/<n>.png|jpg, 4 classes of
48x48 images (stripes of four orientations over noise, drawn with torch and
written with Pillow), half PNG and half JPEG, plus one corrupt file that the
job skips and names among its events.

    .venv/bin/python examples/make_image_folder.py image-folder [IMAGES_PER_CLASS]
"""
import os
import sys

import torch
from PIL import Image

CLASSES = ("horizontal", "vertical", "diagonal", "antidiagonal")


def stripes(kind, size, gen):
    y, x = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    phase = torch.randint(0, 8, (1,), generator=gen).item()
    coord = {"horizontal": y, "vertical": x, "diagonal": x + y, "antidiagonal": x - y}[kind]
    wave = ((coord + phase) // 4 % 2).float()
    color = torch.rand(3, 1, 1, generator=gen) * 0.6 + 0.4
    img = wave[None] * color + torch.rand(3, size, size, generator=gen) * 0.35
    return (img.clamp(0, 1) * 255).to(torch.uint8).permute(1, 2, 0).numpy()


def main():
    out = sys.argv[1]
    per_class = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    gen = torch.Generator().manual_seed(0)
    for label, kind in enumerate(CLASSES):
        os.makedirs(os.path.join(out, kind), exist_ok=True)
        for n in range(per_class):
            image = Image.fromarray(stripes(kind, 48, gen))
            if n % 2:
                image.save(os.path.join(out, kind, f"{n:04d}.jpg"), quality=92)
            else:
                image.save(os.path.join(out, kind, f"{n:04d}.png"))
    with open(os.path.join(out, CLASSES[0], "corrupt.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 this is not the rest of a JPEG")
    print(f"{out}: {len(CLASSES)} classes x {per_class} images, and one corrupt file")


if __name__ == "__main__":
    main()
