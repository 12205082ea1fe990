#include "worker/data/image_folder.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "common/splitmix.h"
#include "worker/data/image_decode.h"

namespace trainyard {
namespace fs = std::filesystem;

namespace {

bool IsImageFile(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

}  // namespace

std::vector<ImageSample> ScanImageFolder(const std::string& root, std::vector<std::string>* classes) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw std::runtime_error("image_folder " + root + ": not a directory");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root, fs::directory_options::follow_directory_symlink, ec)) {
    if (e.is_directory(ec)) names.push_back(e.path().filename().string());
  }
  if (ec) throw std::runtime_error("image_folder " + root + ": " + ec.message());
  std::sort(names.begin(), names.end());
  if (names.empty()) throw std::runtime_error("image_folder " + root + ": no class folders (DIR/<class>/<image>)");
  std::vector<ImageSample> samples;
  for (size_t label = 0; label < names.size(); ++label) {
    // torchvision's order: sorted(os.walk(class_dir)) — folders by path,
    // and within each its files by name.
    std::vector<std::pair<std::string, std::string>> files;  // (folder, name)
    const fs::path dir = fs::path(root) / names[label];
    for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && IsImageFile(it->path())) {
        files.emplace_back(it->path().parent_path().string(), it->path().filename().string());
      }
    }
    std::sort(files.begin(), files.end());
    for (const auto& [folder, name] : files) {
      samples.push_back({(fs::path(folder) / name).string(), static_cast<int64_t>(label)});
    }
  }
  if (samples.empty()) {
    throw std::runtime_error("image_folder " + root + ": no .jpg, .jpeg or .png files in its class folders");
  }
  if (classes != nullptr) *classes = std::move(names);
  return samples;
}

ImageFolderDataset::ImageFolderDataset(std::vector<ImageSample> samples, ImageTransform transform, bool train,
                                       uint64_t seed, NoteFn note)
    : samples_(std::move(samples)),
      transform_(std::move(transform)),
      train_(train),
      seed_(seed),
      note_(std::move(note)) {}

Batch ImageFolderDataset::GetForEpoch(const std::vector<int64_t>& indices, int64_t epoch) const {
  std::vector<at::Tensor> images;
  std::vector<int64_t> labels;
  images.reserve(indices.size());
  std::string first_error;
  for (int64_t i : indices) {
    const ImageSample& s = samples_.at(static_cast<size_t>(i));
    absl::StatusOr<RgbImage> image = DecodeImageFile(s.path);
    if (!image.ok()) {
      const int64_t n = ++skipped_;
      if (first_error.empty()) first_error = std::string(image.status().message());
      if (note_ && n <= kNamedSkips) {
        note_("skipped an unreadable image (" + std::to_string(n) + " so far" +
              (n == kNamedSkips ? "; later ones are counted only" : "") +
              "): " + std::string(image.status().message()));
      }
      continue;
    }
    std::mt19937_64 rng(SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(epoch) ^ SplitMix64(i))));
    images.push_back(TransformImage(*image, transform_, train_ ? &rng : nullptr));
    labels.push_back(s.label);
  }
  if (images.empty()) throw std::runtime_error("no image of the batch could be read: " + first_error);
  for (const at::Tensor& t : images) {
    if (!t.sizes().equals(images[0].sizes())) {
      throw std::runtime_error("image_folder: images of different sizes in one batch (" + samples_[0].path +
                               "...); set data.crop_size");
    }
  }
  return {at::stack(images), at::tensor(labels, at::kLong)};
}

}  // namespace trainyard
