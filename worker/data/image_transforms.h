// torchvision's image transforms on decoded images, with its semantics and
// defaults: Resize(int) scales the shorter side (the longer one to
// int(size * long / short)) with antialiased bilinear filtering and rounds
// to 8 bits, as PIL does; CenterCrop and RandomCrop pad with zeros where the
// image is smaller than the crop; RandomHorizontalFlip flips with p = 0.5;
// ToTensor scales to [0, 1]; Normalize subtracts the mean and divides by the
// std per channel.
#ifndef TRAINYARD_WORKER_DATA_IMAGE_TRANSFORMS_H_
#define TRAINYARD_WORKER_DATA_IMAGE_TRANSFORMS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>
#include <vector>

#include "worker/data/image_decode.h"

namespace trainyard {

struct ImageTransform {
  int64_t resize = 0;  // the shorter side after Resize; 0: no resize
  int64_t crop = 0;    // the side of the square crop; 0: no crop
  bool random_crop = false;
  bool random_flip = false;
  std::vector<double> mean, std;  // three each, or empty: no Normalize
  bool grayscale = false;         // PIL's convert("L") first: one channel
};

// The transformed image, float [C, H, W]. `rng` draws the random crop and
// flip; null means evaluation: a center crop and no flip.
at::Tensor TransformImage(const RgbImage& image, const ImageTransform& t, std::mt19937_64* rng);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_IMAGE_TRANSFORMS_H_
