// Debian's libtorch-dev does not ship this header, which c10d/reducer.hpp
// includes. The Reducer only needs these two names; the declarations match
// PyTorch 1.13's, so the Reducer's layout is unchanged. Trainyard does not use
// distributed autograd.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};

using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
