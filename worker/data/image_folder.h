// ImageFolderDataset: torchvision's ImageFolder layout — DIR/<class>/...
// image files, classes in sorted name order as labels 0, 1, ...; files of a
// class found recursively, in sorted order. JPEG and PNG files (.jpg, .jpeg,
// .png in any case) are read; other files are ignored. Each sample is
// decoded (worker/image_decode.h) and transformed (worker/image_transforms.h)
// when its batch is read; random transforms draw from (seed, epoch, index),
// so any rank, thread or resumed run gets the same sample.
//
// An unreadable or corrupt image is skipped: its batch is one sample
// shorter, the skip is counted, and the first few are named through the
// `note` callback (a job event). Thread-safe (the loader's threads).
#ifndef TRAINYARD_WORKER_DATA_IMAGE_FOLDER_H_
#define TRAINYARD_WORKER_DATA_IMAGE_FOLDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "worker/data/data.h"
#include "worker/data/image_transforms.h"

namespace trainyard {

struct ImageSample {
  std::string path;
  int64_t label = 0;
};

// The classes (sub-folder names, sorted) and samples of `root`. Throws
// std::runtime_error naming `root` when it has no class folder or no image.
std::vector<ImageSample> ScanImageFolder(const std::string& root, std::vector<std::string>* classes);

class ImageFolderDataset final : public Dataset {
 public:
  using NoteFn = std::function<void(const std::string&)>;
  // `train`: random transforms apply; otherwise a center crop, no flip.
  ImageFolderDataset(std::vector<ImageSample> samples, ImageTransform transform, bool train, uint64_t seed,
                     NoteFn note = {});
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Batch Get(const std::vector<int64_t>& indices) const override { return GetForEpoch(indices, 0); }
  // Throws std::runtime_error when no image of the batch could be read.
  Batch GetForEpoch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  int64_t skipped() const { return skipped_.load(); }

  static constexpr int kNamedSkips = 5;  // skips named in notes; the rest counted

 private:
  std::vector<ImageSample> samples_;
  ImageTransform transform_;
  bool train_;
  uint64_t seed_;
  NoteFn note_;
  mutable std::atomic<int64_t> skipped_{0};
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_IMAGE_FOLDER_H_
