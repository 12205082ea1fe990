#include "worker/models/model_flops.h"

#include <ATen/record_function.h>
#include <torch/csrc/profiler/util.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace trainyard {
namespace {

thread_local double counted_flops = 0;

// The fused attention kernels, which the profiler has no formula for:
// FlopCounterMode's, the two matrix products Q·Kᵀ and P·V in full
// (causal masking not subtracted), over the query's heads. The math
// fallback is counted through the matrix products it runs instead.
double AttentionFlops(const at::RecordFunction& fn) {
  static const std::set<std::string> kKernels = {
      "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention",
      "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
      "aten::_scaled_dot_product_fused_attention_overrideable"};
  if (!kKernels.count(fn.name())) return 0;
  const auto inputs = fn.inputs();
  if (inputs.size() < 3 || !inputs[0].isTensor() || !inputs[1].isTensor() || !inputs[2].isTensor()) return 0;
  const at::Tensor& q = inputs[0].toTensor();
  const at::Tensor& k = inputs[1].toTensor();
  const at::Tensor& v = inputs[2].toTensor();
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return 0;
  const double bh = static_cast<double>(q.size(0) * q.size(1));
  const double sq = static_cast<double>(q.size(2)), sk = static_cast<double>(k.size(2));
  return 2 * bh * sq * sk * static_cast<double>(q.size(3)) + 2 * bh * sq * sk * static_cast<double>(v.size(3));
}

std::unique_ptr<at::ObserverContext> CountOp(const at::RecordFunction& fn) {
  counted_flops += AttentionFlops(fn);
  auto args = torch::profiler::impl::saveExtraArgs(fn);
  if (!args.empty()) {
    counted_flops += static_cast<double>(torch::profiler::impl::computeFlops(std::string(fn.name()), args));
  }
  return nullptr;
}

}  // namespace

double CountForwardFlops(const std::function<void()>& forward) {
  counted_flops = 0;
  const bool was_enabled = at::isRecordFunctionEnabled();
  at::enableRecordFunction(true);
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&CountOp).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  try {
    forward();
  } catch (...) {
    at::removeCallback(handle);
    at::enableRecordFunction(was_enabled);
    throw;
  }
  at::removeCallback(handle);
  at::enableRecordFunction(was_enabled);
  return counted_flops;
}

double PeakFlops(const std::string& device_name, MixedPrecision precision) {
  struct Row {
    const char* name;  // a part of the device name
    double half;       // bf16/fp16 dense tensor-core FLOP/s (0: no bf16)
    double fp16;       // fp16 dense tensor-core FLOP/s
    double fp32;       // plain fp32 FLOP/s
  };
  // Most specific names first (the H100 variants before "H100").
  static const Row kTable[] = {
      {"H100 PCIe", 756e12, 756e12, 51.2e12}, {"H100 NVL", 835e12, 835e12, 60e12},
      {"H100", 989.4e12, 989.4e12, 66.9e12},  {"H200", 989.4e12, 989.4e12, 66.9e12},
      {"A100", 312e12, 312e12, 19.5e12},      {"L40S", 362.05e12, 362.05e12, 91.6e12},
      {"L4", 121e12, 121e12, 30.3e12},        {"A10", 125e12, 125e12, 31.2e12},
      {"V100", 0, 125e12, 15.7e12},
  };
  // Whole words only ("A10" is not "A10G"); words end at spaces and dashes
  // ("NVIDIA A100-SXM4-80GB").
  auto words = [](const std::string& text) {
    std::vector<std::string> out(1);
    for (char c : text) {
      if (c == ' ' || c == '-') {
        if (!out.back().empty()) out.emplace_back();
      } else {
        out.back() += c;
      }
    }
    if (out.back().empty()) out.pop_back();
    return out;
  };
  const std::vector<std::string> name = words(device_name);
  for (const Row& r : kTable) {
    const std::vector<std::string> want = words(r.name);
    if (want.size() > name.size() || std::search(name.begin(), name.end(), want.begin(), want.end()) == name.end()) {
      continue;
    }
    switch (precision) {
      case MixedPrecision::kBf16: return r.half;
      case MixedPrecision::kFp16: return r.fp16;
      case MixedPrecision::kNo: return r.fp32;
    }
  }
  return 0;
}

}  // namespace trainyard
