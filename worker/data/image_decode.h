// Decoding of image files with Debian's libjpeg-turbo and libpng into 8-bit
// RGB, as PIL's Image.open(path).convert("RGB") gives them (torchvision's
// ImageFolder loader): grayscale is repeated into three channels, palettes
// are expanded, alpha is dropped, 16-bit samples are reduced to 8.
#ifndef TRAINYARD_WORKER_DATA_IMAGE_DECODE_H_
#define TRAINYARD_WORKER_DATA_IMAGE_DECODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

struct RgbImage {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;  // height x width x 3, row-major
};

// Decodes a JPEG or PNG file (recognised by its first bytes, not its name).
// A truncated, corrupt or unsupported file is an error naming the file.
absl::StatusOr<RgbImage> DecodeImageFile(const std::string& path);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_IMAGE_DECODE_H_
