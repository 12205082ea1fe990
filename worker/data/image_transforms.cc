#include "worker/data/image_transforms.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

namespace trainyard {
namespace {

// uint8 [C, H, W] from interleaved RGB, in grayscale with PIL's integer
// ITU-R 601-2 luma when asked.
at::Tensor ToChannels(const RgbImage& image, bool grayscale) {
  const at::Tensor hwc =
      at::from_blob(const_cast<uint8_t*>(image.pixels.data()), {image.height, image.width, 3}, at::kByte);
  if (!grayscale) return hwc.permute({2, 0, 1}).contiguous();
  const at::Tensor rgb = hwc.to(at::kInt);
  const at::Tensor l =
      at::floor_divide(rgb.select(2, 0) * 19595 + rgb.select(2, 1) * 38470 + rgb.select(2, 2) * 7471 + 0x8000, 65536);
  return l.to(at::kByte).unsqueeze(0);
}

// torchvision's Resize(size) for an int size: the shorter side becomes
// `size`, the longer int(size * long / short). PIL filters with an
// antialiased bilinear kernel and stores 8 bits.
at::Tensor ResizeShorterSide(const at::Tensor& chw, int64_t size) {
  const int64_t h = chw.size(1), w = chw.size(2);
  const int64_t small = std::min(h, w), large = std::max(h, w);
  const auto other = static_cast<int64_t>(static_cast<double>(size * large) / static_cast<double>(small));
  const int64_t nh = h <= w ? size : other, nw = h <= w ? other : size;
  if (nh == h && nw == w) return chw;
  const at::Tensor resized = at::_upsample_bilinear2d_aa(chw.unsqueeze(0).to(at::kFloat), {nh, nw},
                                                         /*align_corners=*/false, std::nullopt, std::nullopt);
  return resized.squeeze(0).round().clamp(0, 255).to(at::kByte);
}

// Zero padding up to `crop` on each side that is smaller, split as
// torchvision's CenterCrop splits it (the extra pixel after).
at::Tensor PadTo(const at::Tensor& chw, int64_t crop) {
  const int64_t h = chw.size(1), w = chw.size(2);
  if (h >= crop && w >= crop) return chw;
  const int64_t ph = std::max<int64_t>(0, crop - h), pw = std::max<int64_t>(0, crop - w);
  at::Tensor out = at::zeros({chw.size(0), h + ph, w + pw}, chw.options());
  out.narrow(1, ph / 2, h).narrow(2, pw / 2, w).copy_(chw);
  return out;
}

}  // namespace

at::Tensor TransformImage(const RgbImage& image, const ImageTransform& t, std::mt19937_64* rng) {
  if (image.height <= 0 || image.width <= 0) throw std::invalid_argument("an empty image");
  at::Tensor x = ToChannels(image, t.grayscale);
  if (t.resize > 0) x = ResizeShorterSide(x, t.resize);
  if (t.crop > 0) {
    x = PadTo(x, t.crop);
    const int64_t h = x.size(1), w = x.size(2);
    int64_t top = 0, left = 0;
    if (t.random_crop && rng != nullptr) {
      top = std::uniform_int_distribution<int64_t>(0, h - t.crop)(*rng);
      left = std::uniform_int_distribution<int64_t>(0, w - t.crop)(*rng);
    } else {
      // Python's round(): halves to even.
      top = static_cast<int64_t>(std::nearbyint(static_cast<double>(h - t.crop) / 2.0));
      left = static_cast<int64_t>(std::nearbyint(static_cast<double>(w - t.crop) / 2.0));
    }
    x = x.narrow(1, top, t.crop).narrow(2, left, t.crop);
  }
  if (t.random_flip && rng != nullptr && std::uniform_real_distribution<double>(0.0, 1.0)(*rng) < 0.5) {
    x = x.flip({2});
  }
  at::Tensor out = x.to(at::kFloat).div_(255.0);
  if (!t.mean.empty()) {
    const int64_t c = out.size(0);
    for (int64_t i = 0; i < c; ++i) {
      out[i].sub_(t.mean.at(static_cast<size_t>(i))).div_(t.std.at(static_cast<size_t>(i)));
    }
  }
  return out.contiguous();
}

}  // namespace trainyard
