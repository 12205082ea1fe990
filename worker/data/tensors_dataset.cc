#include "worker/data/tensors_dataset.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

namespace trainyard {
namespace fs = std::filesystem;
namespace {

const TensorSpec* Find(const SafetensorsHeader& h, const std::string& name) {
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.spec.name == name) return &e.spec;
  }
  return nullptr;
}

std::string Shape(const std::vector<int64_t>& shape) { return c10::str(c10::IntArrayRef(shape)); }

}  // namespace

TensorsDataset::TensorsDataset(const std::string& path, const std::string& inputs, const std::string& targets)
    : inputs_(inputs), targets_(targets) {
  std::vector<std::string> paths;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors") paths.push_back(e.path().string());
    }
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) throw std::runtime_error(path + ": no .safetensors files in this directory");
  } else if (fs::is_regular_file(path, ec)) {
    paths.push_back(path);
  } else {
    throw std::runtime_error(path + ": no such file or directory");
  }
  for (const std::string& p : paths) {
    File f{p, ReadSafetensorsHeader(p)};
    const TensorSpec* in = Find(f.header, inputs_);
    const TensorSpec* tg = Find(f.header, targets_);
    if (in == nullptr || tg == nullptr) {
      throw std::runtime_error(p + ": has no tensor '" + (in == nullptr ? inputs_ : targets_) +
                               "' (data.inputs / data.targets name the tensors)");
    }
    if (in->shape.empty() || tg->shape.empty() || in->shape[0] != tg->shape[0]) {
      throw std::runtime_error(p + ": '" + inputs_ + "' " + Shape(in->shape) + " and '" + targets_ + "' " +
                               Shape(tg->shape) + " must have the same first dimension (the samples)");
    }
    if (!at::isIntegralType(tg->dtype, /*includeBool=*/false)) {
      throw std::runtime_error(p + ": '" + targets_ + "' is " + SafetensorsDtype(tg->dtype) +
                               "; targets are integer class indices");
    }
    const std::vector<int64_t> in_shape(in->shape.begin() + 1, in->shape.end());
    const std::vector<int64_t> tg_shape(tg->shape.begin() + 1, tg->shape.end());
    if (files_.empty()) {
      input_shape_ = in_shape;
      target_shape_ = tg_shape;
      input_dtype_ = at::isFloatingType(in->dtype) ? at::kFloat : at::kLong;
    } else if (in_shape != input_shape_ || tg_shape != target_shape_) {
      throw std::runtime_error(p + ": samples of shape " + Shape(in_shape) + " / " + Shape(tg_shape) + ", but " +
                               files_.front().path + " has " + Shape(input_shape_) + " / " + Shape(target_shape_));
    }
    f.first = size_;
    f.count = in->shape[0];
    size_ += f.count;
    files_.push_back(std::move(f));
  }
  if (size_ == 0) throw std::runtime_error(path + ": holds no samples");
}

at::Tensor TensorsDataset::Rows(const std::string& name, const std::vector<int64_t>& shape,
                                const std::vector<int64_t>& indices, at::ScalarType out) const {
  int64_t row = 1;
  for (int64_t d : shape) row *= d;
  std::vector<int64_t> full = {static_cast<int64_t>(indices.size())};
  full.insert(full.end(), shape.begin(), shape.end());
  at::Tensor result = at::empty(full, at::TensorOptions(out));
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t index = indices[i];
    if (index < 0 || index >= size_) throw std::out_of_range("sample " + std::to_string(index) + " out of range");
    auto it =
        std::upper_bound(files_.begin(), files_.end(), index, [](int64_t v, const File& f) { return v < f.first; });
    const File& f = *std::prev(it);
    const int64_t local = index - f.first;
    result[static_cast<int64_t>(i)].view({-1}).copy_(
        ReadSafetensorRange(f.path, f.header, name, local * row, (local + 1) * row));
  }
  return result;
}

Batch TensorsDataset::Get(const std::vector<int64_t>& indices) const {
  return {Rows(inputs_, input_shape_, indices, input_dtype_), Rows(targets_, target_shape_, indices, at::kLong)};
}

}  // namespace trainyard
