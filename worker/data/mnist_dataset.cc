#include "worker/data/mnist_dataset.h"

#include <unistd.h>
#include <zlib.h>

#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace trainyard {

namespace {

// The whole content of a file, gunzipped when it is gzip data.
std::string ReadMaybeGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files unchanged
  if (f == nullptr) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) throw std::runtime_error("cannot read " + path + ": " + msg);
  return out;
}

uint32_t BigEndian32(const std::string& data, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(data[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(data[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(data[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(data[at + 3]));
}

// `dir`/`name` or `dir`/`name`.gz, whichever exists.
std::string IdxPath(const std::string& dir, const std::string& name) {
  for (const std::string& candidate : {dir + "/" + name, dir + "/" + name + ".gz"}) {
    if (::access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  throw std::runtime_error("MNIST: neither " + dir + "/" + name + " nor " + name + ".gz is readable");
}

}  // namespace

MnistDataset::MnistDataset(const std::string& dir, bool train, std::vector<int64_t> sample_shape) {
  const std::string split = train ? "train" : "t10k";
  const std::string ipath = IdxPath(dir, split + "-images-idx3-ubyte");
  const std::string lpath = IdxPath(dir, split + "-labels-idx1-ubyte");
  const std::string images = ReadMaybeGzip(ipath), labels = ReadMaybeGzip(lpath);
  if (images.size() < 16 || BigEndian32(images, 0) != 0x00000803) {
    throw std::runtime_error(ipath + ": not an IDX image file (magic 0x00000803)");
  }
  if (labels.size() < 8 || BigEndian32(labels, 0) != 0x00000801) {
    throw std::runtime_error(lpath + ": not an IDX label file (magic 0x00000801)");
  }
  const int64_t n = BigEndian32(images, 4), rows = BigEndian32(images, 8), cols = BigEndian32(images, 12);
  if (rows != 28 || cols != 28) {
    throw std::runtime_error(ipath + ": images are " + std::to_string(rows) + "x" + std::to_string(cols) +
                             ", not 28x28");
  }
  if (static_cast<int64_t>(images.size()) != 16 + n * 784) throw std::runtime_error(ipath + ": truncated");
  if (static_cast<int64_t>(BigEndian32(labels, 4)) != n || static_cast<int64_t>(labels.size()) != 8 + n) {
    throw std::runtime_error(lpath + ": has a different count or is truncated (" + std::to_string(n) + " images)");
  }
  int64_t per = 1;
  for (int64_t d : sample_shape) per *= d;
  if (per != 784) throw std::runtime_error("MNIST images have 784 pixels; the model takes " + std::to_string(per));
  at::Tensor raw = at::empty({n, 784}, at::kByte);
  std::memcpy(raw.data_ptr(), images.data() + 16, static_cast<size_t>(n * 784));
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  images_ = ((raw.to(at::kFloat) / 255.0 - 0.1307) / 0.3081).reshape(shape);
  labels_ = at::empty({n}, at::kByte);
  std::memcpy(labels_.data_ptr(), labels.data() + 8, static_cast<size_t>(n));
  labels_ = labels_.to(at::kLong);
  if (labels_.max().item<int64_t>() > 9) throw std::runtime_error(lpath + ": labels must be 0..9");
}

Batch MnistDataset::Get(const std::vector<int64_t>& indices) const {
  at::Tensor idx = at::tensor(indices, at::kLong);
  return {images_.index_select(0, idx), labels_.index_select(0, idx)};
}

}  // namespace trainyard
