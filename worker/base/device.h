// The compute device of one rank: which GPU a CUDA job's rank uses, making
// it current before any CUDA work or NCCL group, moving tensors to and from
// host memory, and reading the device allocator's memory counters. Device-
// generic through LibTorch's accelerator API: no CUDA header is needed here,
// and a CPU job never touches CUDA.
#ifndef TRAINYARD_WORKER_BASE_DEVICE_H_
#define TRAINYARD_WORKER_BASE_DEVICE_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

#include "common/job_spec.h"

namespace trainyard {

// This rank's device: the CPU, or for device cuda the one GPU this process
// sees (the local launcher's CUDA_VISIBLE_DEVICES) or the LOCAL_RANK-th of
// the node's (Slurm --gres, torchrun-style launches). Throws
// std::runtime_error naming the cause when no such GPU is visible.
c10::Device RankDevice(Device device);

// Makes `device` current for this thread (torch.cuda.set_device); a no-op
// for the CPU. Call before creating an NCCL group and on every thread that
// launches work on the device.
void UseDevice(c10::Device device);

// Number of CUDA devices this process sees (0 on a build or machine without).
int CudaDeviceCount();

// The device allocator's counters, in bytes (CUDA caching allocator).
struct DeviceMemory {
  int64_t allocated = 0;       // held by live tensors now
  int64_t peak_allocated = 0;  // highest `allocated` since the last ResetPeakMemory
  int64_t reserved = 0;        // held by the allocator (cached blocks included)
};
// nullopt for the CPU.
std::optional<DeviceMemory> ReadDeviceMemory(c10::Device device);
void ResetPeakMemory(c10::Device device);

// Waits for the device's queued work (torch.cuda.synchronize); a no-op for
// the CPU. Timers that measure device work call it first.
void Synchronize(c10::Device device);

// The PCI bus id of a CUDA device as NVML takes it ("00000000:3B:00.0");
// empty for the CPU or a build without CUDA.
std::string PciBusId(c10::Device device);

// "cpu", or the name CUDA gives the device ("NVIDIA H100 80GB HBM3").
std::string DeviceName(c10::Device device);

// `t` in host memory (a no-op for CPU tensors); `pinned` page-locks the copy
// so that later host<->device copies of it can run asynchronously.
at::Tensor ToHost(const at::Tensor& t, bool pinned = false);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_BASE_DEVICE_H_
