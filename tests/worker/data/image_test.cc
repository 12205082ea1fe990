// image_folder data against PIL, the library torchvision's ImageFolder reads
// and transforms with: tests/fixtures/images.py writes the images and PIL's
// results; ours must equal them (decoding exactly for PNG, within one level
// for JPEG; transforms within 1/255, as PIL rounds to 8 bits after resizing).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tests/test_paths.h"
#include "tests/test_util.h"
#include "worker/base/safetensors.h"
#include "worker/data/image_decode.h"
#include "worker/data/image_folder.h"
#include "worker/data/image_transforms.h"

namespace trainyard {
namespace {

const char* const kFiles[] = {"cat/a.png", "cat/b.jpg", "cat/z.png",  "cat/sub/c.png",
                              "dog/d.png", "dog/e.PNG", "dog/f.jpeg", "dog/g.jpg"};

class ImageData : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string cmd = std::string(TRAINYARD_TEST_PYTHON) + " " + TRAINYARD_SOURCE_DIR +
                            "/tests/fixtures/images.py " + dir_->path() + " 2> " + dir_->path() + "/python.log";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string Folder() { return dir_->path() + "/folder"; }
  static at::Tensor Expected(const std::string& key) {
    const std::string path = dir_->path() + "/expected.safetensors";
    return ReadSafetensor(path, ReadSafetensorsHeader(path), key);
  }
  static RgbImage Decode(const std::string& rel) {
    absl::StatusOr<RgbImage> image = DecodeImageFile(Folder() + "/" + rel);
    EXPECT_TRUE(image.ok()) << image.status();
    return image.ok() ? *image : RgbImage{};
  }
  static double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
    EXPECT_EQ(a.sizes(), b.sizes());
    if (a.sizes() != b.sizes()) return 1e9;
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  }
  static TempDir* dir_;
};
TempDir* ImageData::dir_ = nullptr;

TEST_F(ImageData, DecodesAsPilConvertRgb) {
  for (const std::string rel : kFiles) {
    const RgbImage image = Decode(rel);
    const at::Tensor ours =
        at::from_blob(const_cast<uint8_t*>(image.pixels.data()), {image.height, image.width, 3}, at::kByte).clone();
    const at::Tensor pil = Expected("raw/" + rel);
    const bool jpeg = rel.find(".jp") != std::string::npos;
    // PNG is lossless: the same bytes. JPEG decoders may differ by a level.
    EXPECT_LE(MaxDiff(ours, pil), jpeg ? 1.0 : 0.0) << rel;
  }
}

TEST_F(ImageData, ResizeCropNormalizeAndGrayscaleMatchTorchvisionsPilPath) {
  ImageTransform t32;
  t32.resize = 32;
  t32.crop = 32;
  ImageTransform n24;
  n24.resize = 30;
  n24.crop = 24;
  n24.mean = {0.485, 0.456, 0.406};
  n24.std = {0.229, 0.224, 0.225};
  ImageTransform g28;
  g28.resize = 28;
  g28.crop = 28;
  g28.grayscale = true;
  for (const std::string rel : kFiles) {
    const RgbImage image = Decode(rel);
    EXPECT_LE(MaxDiff(TransformImage(image, t32, nullptr), Expected("t32/" + rel)), 1.0 / 255 + 1e-6) << rel;
    // One level before Normalize is 1/255/std after it.
    EXPECT_LE(MaxDiff(TransformImage(image, n24, nullptr), Expected("n24/" + rel)), 1.0 / 255 / 0.224 + 1e-5) << rel;
    EXPECT_LE(MaxDiff(TransformImage(image, g28, nullptr), Expected("g28/" + rel)), 1.0 / 255 + 1e-6) << rel;
  }
}

TEST_F(ImageData, ClassesAndFilesInTorchvisionsOrderOtherFilesIgnored) {
  std::vector<std::string> classes;
  const std::vector<ImageSample> samples = ScanImageFolder(Folder(), &classes);
  EXPECT_EQ(classes, (std::vector<std::string>{"cat", "dog"}));
  std::vector<std::string> got;
  for (const ImageSample& s : samples) {
    got.push_back(std::filesystem::path(s.path).lexically_relative(Folder()).string() + ":" + std::to_string(s.label));
  }
  EXPECT_EQ(
      got, (std::vector<std::string>{"cat/a.png:0", "cat/b.jpg:0", "cat/z.png:0", "cat/sub/c.png:0", "dog/broken.jpg:1",
                                     "dog/d.png:1", "dog/e.PNG:1", "dog/f.jpeg:1", "dog/g.jpg:1"}));
  EXPECT_THROW(ScanImageFolder(Folder() + "/cat/sub", nullptr), std::runtime_error);  // no class folders
}

TEST_F(ImageData, ACorruptImageIsSkippedCountedAndNamed) {
  std::mutex mu;
  std::vector<std::string> notes;
  ImageTransform t;
  t.resize = 32;
  t.crop = 32;
  ImageFolderDataset data(ScanImageFolder(Folder(), nullptr), t, /*train=*/false, 1, [&](const std::string& n) {
    std::lock_guard<std::mutex> lock(mu);
    notes.push_back(n);
  });
  ASSERT_EQ(data.size(), 9);
  const Batch b = data.Get({0, 4, 5});  // 4 is broken.jpg
  EXPECT_EQ(b.inputs.size(0), 2);
  ASSERT_EQ(b.targets.numel(), 2);
  EXPECT_EQ(b.targets[0].item<int64_t>(), 0);
  EXPECT_EQ(b.targets[1].item<int64_t>(), 1);
  EXPECT_LE(MaxDiff(b.inputs[1], Expected("t32/dog/d.png")), 1.0 / 255 + 1e-6);
  EXPECT_EQ(data.skipped(), 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("broken.jpg"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("JPEG"), std::string::npos) << notes[0];
  EXPECT_THROW(data.Get({4}), std::runtime_error);  // nothing readable in the batch
  EXPECT_EQ(data.skipped(), 2);
}

TEST_F(ImageData, RandomCropAndFlipDependOnSeedEpochAndIndexOnly) {
  ImageTransform t;
  t.resize = 40;
  t.crop = 32;
  t.random_crop = true;
  t.random_flip = true;
  const std::vector<ImageSample> samples = ScanImageFolder(Folder(), nullptr);
  ImageFolderDataset a(samples, t, /*train=*/true, 5), b(samples, t, /*train=*/true, 5);
  const std::vector<int64_t> idx = {0, 1, 2, 3, 5, 6, 7, 8};
  const at::Tensor e0 = a.GetForEpoch(idx, 0).inputs;
  EXPECT_TRUE(e0.equal(b.GetForEpoch(idx, 0).inputs));   // another reader, the same draw
  EXPECT_FALSE(e0.equal(a.GetForEpoch(idx, 1).inputs));  // a new epoch, new crops
  // Evaluation takes the center crop.
  ImageFolderDataset eval(samples, t, /*train=*/false, 5);
  ImageTransform center = t;
  center.random_crop = center.random_flip = false;
  const at::Tensor e = eval.GetForEpoch({6}, 3).inputs[0];
  EXPECT_TRUE(e.equal(TransformImage(Decode("dog/e.PNG"), center, nullptr)));
}

TEST_F(ImageData, FlipIsAMirrorHalfTheTime) {
  ImageTransform t;
  t.resize = 32;
  t.crop = 32;
  t.random_flip = true;
  ImageFolderDataset data(ScanImageFolder(Folder(), nullptr), t, /*train=*/true, 9);
  const at::Tensor ref = Expected("t32/dog/g.jpg");
  int flipped = 0, kept = 0;
  for (int64_t epoch = 0; epoch < 40; ++epoch) {
    const at::Tensor x = data.GetForEpoch({8}, epoch).inputs[0];
    if (MaxDiff(x, ref) <= 1.0 / 255 + 1e-6) ++kept;
    if (MaxDiff(x, ref.flip({2})) <= 1.0 / 255 + 1e-6) ++flipped;
  }
  EXPECT_EQ(kept + flipped, 40);
  EXPECT_GE(kept, 10);
  EXPECT_GE(flipped, 10);
}

TEST(ImageDecode, NotAnImageAndMissingFilesAreNamedErrors) {
  TempDir dir;
  {
    std::FILE* f = std::fopen((dir.path() + "/x.png").c_str(), "w");
    std::fputs("hello", f);
    std::fclose(f);
  }
  absl::StatusOr<RgbImage> r = DecodeImageFile(dir.path() + "/x.png");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("x.png"), std::string::npos);
  r = DecodeImageFile(dir.path() + "/none.jpg");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("none.jpg"), std::string::npos);
}

}  // namespace
}  // namespace trainyard
