#include "worker/base/device.h"

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <torch/torch.h>
#ifdef TRAINYARD_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/placement.h"

namespace trainyard {

int CudaDeviceCount() {
  if (!at::globalContext().hasCUDA()) return 0;
  return static_cast<int>(torch::cuda::device_count());
}

c10::Device RankDevice(Device device) {
  if (device == Device::kCpu) return c10::Device(c10::kCPU);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string visible_text = visible == nullptr ? "(unset)" : visible;
  const int count = CudaDeviceCount();
  if (count == 0) {
    throw std::runtime_error("device cuda: no CUDA device is visible to this worker (CUDA_VISIBLE_DEVICES=" +
                             visible_text + (at::globalContext().hasCUDA() ? "" : "; no CUDA driver found") + ")");
  }
  // One visible GPU is this rank's; with several, LOCAL_RANK picks one.
  const int index = count == 1 ? 0 : LocalRankFromEnvironment();
  if (index < 0 || index >= count) {
    throw std::runtime_error("device cuda: local rank " + std::to_string(index) + " but only " + std::to_string(count) +
                             " CUDA devices are visible (CUDA_VISIBLE_DEVICES=" + visible_text + ")");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

void UseDevice(c10::Device device) {
  if (device.is_cpu()) return;
  at::accelerator::setDeviceIndex(device.index());
}

std::optional<DeviceMemory> ReadDeviceMemory(c10::Device device) {
  if (device.is_cpu()) return std::nullopt;
  const auto stats = at::accelerator::getDeviceStats(device.index());
  constexpr size_t kAll = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
  DeviceMemory m;
  m.allocated = stats.allocated_bytes[kAll].current;
  m.peak_allocated = stats.allocated_bytes[kAll].peak;
  m.reserved = stats.reserved_bytes[kAll].current;
  return m;
}

void ResetPeakMemory(c10::Device device) {
  if (!device.is_cpu()) at::accelerator::resetPeakStats(device.index());
}

void Synchronize(c10::Device device) {
  if (!device.is_cpu()) at::accelerator::synchronizeDevice(device.index());
}

std::string DeviceName(c10::Device device) {
#ifdef TRAINYARD_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  return device.str();
}

std::string PciBusId(c10::Device device) {
#ifdef TRAINYARD_WITH_CUDA
  if (device.is_cuda()) {
    const auto* p = at::cuda::getDeviceProperties(device.index());
    char id[32];
    std::snprintf(id, sizeof(id), "%08X:%02X:%02X.0", static_cast<unsigned>(p->pciDomainID),
                  static_cast<unsigned>(p->pciBusID), static_cast<unsigned>(p->pciDeviceID));
    return id;
  }
#endif
  (void)device;
  return "";
}

at::Tensor ToHost(const at::Tensor& t, bool pinned) {
  if (t.device().is_cpu()) return t;
  return t.to(t.options().device(c10::kCPU).pinned_memory(pinned), /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace trainyard
