// GpuMonitor: what the NVIDIA driver says about one GPU — utilization,
// memory, power, temperature, ECC error counts and Xid errors — read through
// NVML (libnvidia-ml.so.1, which the driver ships), loaded with dlopen so
// that the worker runs where there is no driver. A background thread reads
// the GPU every `interval`; the step sink attaches the latest reading to the
// rank's step metrics (GpuSink). Torch-free.
#ifndef TRAINYARD_WORKER_BASE_GPU_MONITOR_H_
#define TRAINYARD_WORKER_BASE_GPU_MONITOR_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/step_metrics.h"

namespace trainyard {

// One reading of a GPU. Fields NVML could not give (a GPU without power
// readings, ECC off) are -1.
struct GpuReading {
  double utilization = -1;         // share of the last sample period a kernel ran, 0..1
  int64_t memory_used_bytes = -1;  // device memory in use, every process
  int64_t memory_total_bytes = -1;
  double power_watts = -1;
  double temperature_celsius = -1;
  int64_t ecc_corrected = -1;    // volatile (since the driver loaded) single-bit errors
  int64_t ecc_uncorrected = -1;  // volatile double-bit errors
  int64_t xid_errors = 0;        // Xid critical error events seen since the previous reading taken
  int64_t last_xid = 0;          // the last Xid seen (0: none)
};

// The NVML functions Trainyard uses; opened once per process.
class Nvml;

class GpuMonitor {
 public:
  // Opens NVML and the GPU at `pci_bus_id` ("00000000:3B:00.0", as CUDA
  // gives it). An error says why (no libnvidia-ml.so.1, no such GPU...).
  static absl::StatusOr<std::unique_ptr<GpuMonitor>> Open(const std::string& pci_bus_id);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Reads the GPU now (blocking NVML calls; also drains pending Xid events).
  GpuReading Read();
  // The GPU's name as NVML says it.
  const std::string& name() const { return name_; }

  // Reads every `interval` on a thread of its own until destroyed.
  void StartSampling(std::chrono::milliseconds interval);
  // The latest sampled reading; Xid events are handed out once (the next
  // call reports 0 new ones until more arrive). nullopt-like: utilization
  // -1 and memory_total_bytes -1 until the first sample.
  GpuReading Latest();

 private:
  GpuMonitor() = default;
  std::shared_ptr<Nvml> nvml_;
  void* device_ = nullptr;     // nvmlDevice_t
  void* event_set_ = nullptr;  // nvmlEventSet_t, when Xid events can be watched
  std::string name_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  GpuReading latest_;
  int64_t pending_xids_ = 0;
  std::thread thread_;
};

// Copies a reading into the step's numbers (gpu_* of common/step_metrics.h).
void FillGpuNumbers(const GpuReading& r, StepMetrics* m);

// A MetricsSink in front of `next` that adds `monitor`'s latest reading
// (when it has one) to every step it forwards.
class GpuSink final : public MetricsSink {
 public:
  GpuSink(MetricsSink* next, GpuMonitor* monitor) : next_(next), monitor_(monitor) {}
  void OnStep(const StepMetrics& m) override;
  void OnCheckpoint(const CheckpointEvent& c) override { next_->OnCheckpoint(c); }
  void OnNote(const std::string& text) override { next_->OnNote(text); }

 private:
  MetricsSink* next_;
  GpuMonitor* monitor_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_BASE_GPU_MONITOR_H_
