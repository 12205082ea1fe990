// StepMetrics: what one rank reports about one training step. Plain data.
#ifndef TRAINYARD_COMMON_STEP_METRICS_H_
#define TRAINYARD_COMMON_STEP_METRICS_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "common/checkpoint_type.h"

namespace trainyard {

// Every number a rank reports about one training step, declared once: the
// StepMetrics struct, its proto (v1::MetricsSample, fields of the same
// names), the worker's recorder and the coordinator's per-rank series all
// follow this list.
//
//   X(type, name, initial value, family, kind, label, when, help)
//
// `family` is the Prometheus family the coordinator exports the number in
// ("" for none: derived series, or the wire only), with labels job_id, rank
// and, when `label` is "key=value", that label. `kind` says how: kGauge is
// set to the value, kCounter increased by it, kHistogram observes it. A
// rank's series appear with its first sample where `when` holds (written
// over the sample `m`), and follow every sample where it holds.
#define TRAINYARD_STEP_NUMBERS(X)                                                                                     \
  X(int32_t, rank, 0, "", kNone, "", true, "")                                                                        \
  X(int64_t, step, 0, "trainyard_job_step", kGauge, "", true, "Last completed training step")                         \
  X(double, loss, 0, "trainyard_job_loss", kGauge, "", true, "Training loss at the last step")                        \
  X(double, samples_per_second, 0, "trainyard_job_samples_per_second", kGauge, "", true,                              \
    "Training throughput of one rank over its last step")                                                             \
  X(double, step_seconds, 0, "trainyard_job_step_duration_seconds", kHistogram, "phase=step", true, kStepPhasesHelp)  \
  X(double, data_seconds, 0, "trainyard_job_step_duration_seconds", kHistogram, "phase=data_wait", true,              \
    kStepPhasesHelp)                                                                                                  \
  X(double, compute_seconds, 0, "trainyard_job_step_duration_seconds", kHistogram, "phase=compute", true,             \
    kStepPhasesHelp)                                                                                                  \
  X(double, optimizer_seconds, 0, "trainyard_job_step_duration_seconds", kHistogram, "phase=optimizer", true,         \
    kStepPhasesHelp)                                                                                                  \
  X(double, forward_seconds, 0, "", kNone, "", true, "")                                                              \
  X(double, learning_rate, 0, "trainyard_job_learning_rate", kGauge, "", true, "Learning rate at the last step")      \
  X(int64_t, samples, 0, "trainyard_job_samples_total", kCounter, "", true, "Samples processed by one rank")          \
  X(double, eval_loss, std::nan(""), "trainyard_job_eval_loss", kGauge, "", !std::isnan(m.eval_loss),                 \
    "Loss on the held-out split at the last evaluation (jobs with eval_every_steps)")                                 \
  X(double, grad_norm, std::nan(""), "trainyard_job_grad_norm", kGauge, "", !std::isnan(m.grad_norm),                 \
    "Global gradient norm before clipping at the last step (jobs with max_grad_norm)")                                \
  X(int64_t, comm_wire_bytes, 0, "trainyard_job_comm_wire_bytes_total", kCounter, "", m.comm_fp32_bytes > 0,          \
    "Gradient payload bytes handed to collectives (after compression)")                                               \
  X(int64_t, comm_fp32_bytes, 0, "trainyard_job_comm_fp32_equivalent_bytes_total", kCounter, "",                      \
    m.comm_fp32_bytes > 0, "Bytes plain fp32 allreduce would have carried for the same gradients")                    \
  X(double, comm_hook_seconds, 0, "trainyard_job_comm_hook_seconds_total", kCounter, "", m.comm_fp32_bytes > 0,       \
    "Time spent in the DDP communication hook")                                                                       \
  X(int64_t, param_bytes, 0, "trainyard_job_memory_bytes", kGauge, "kind=parameters", true, kMemoryHelp)              \
  X(int64_t, grad_bytes, 0, "trainyard_job_memory_bytes", kGauge, "kind=gradients", true, kMemoryHelp)                \
  X(int64_t, optimizer_bytes, 0, "trainyard_job_memory_bytes", kGauge, "kind=optimizer_state", true, kMemoryHelp)     \
  X(int64_t, device_allocated_bytes, 0, "trainyard_job_memory_bytes", kGauge, "kind=device_allocated",                \
    m.device_peak_bytes > 0, kMemoryHelp)                                                                             \
  X(int64_t, device_peak_bytes, 0, "trainyard_job_memory_bytes", kGauge, "kind=device_peak", m.device_peak_bytes > 0, \
    kMemoryHelp)                                                                                                      \
  X(int64_t, allgather_bytes, 0, "trainyard_job_fsdp_collective_bytes_total", kCounter, "op=all_gather",              \
    m.allgather_bytes + m.reduce_scatter_bytes > 0, kFsdpBytesHelp)                                                   \
  X(int64_t, reduce_scatter_bytes, 0, "trainyard_job_fsdp_collective_bytes_total", kCounter, "op=reduce_scatter",     \
    m.allgather_bytes + m.reduce_scatter_bytes > 0, kFsdpBytesHelp)                                                   \
  X(double, sharded_comm_seconds, 0, "trainyard_job_fsdp_collective_seconds_total", kCounter, "",                     \
    m.allgather_bytes + m.reduce_scatter_bytes > 0, "Time spent in FSDP collectives")                                 \
  X(double, gpu_utilization, -1, "trainyard_job_gpu_utilization_ratio", kGauge, "", m.gpu_memory_total_bytes > 0,     \
    "Share of the last sample period (NVML's, 1/6 s to 1 s) in which a kernel ran on the rank's GPU")                 \
  X(int64_t, gpu_memory_used_bytes, -1, "trainyard_job_gpu_memory_bytes", kGauge, "kind=used",                        \
    m.gpu_memory_total_bytes > 0, kGpuMemoryHelp)                                                                     \
  X(int64_t, gpu_memory_total_bytes, -1, "trainyard_job_gpu_memory_bytes", kGauge, "kind=total",                      \
    m.gpu_memory_total_bytes > 0, kGpuMemoryHelp)                                                                     \
  X(double, gpu_power_watts, -1, "trainyard_job_gpu_power_watts", kGauge, "",                                         \
    m.gpu_memory_total_bytes > 0 && m.gpu_power_watts >= 0, "Power draw of the rank's GPU (NVML)")                    \
  X(double, gpu_temperature_celsius, -1, "trainyard_job_gpu_temperature_celsius", kGauge, "",                         \
    m.gpu_memory_total_bytes > 0 && m.gpu_temperature_celsius >= 0, "Temperature of the rank's GPU die (NVML)")       \
  X(int64_t, gpu_ecc_corrected, -1, "trainyard_job_gpu_ecc_errors", kGauge, "type=corrected",                         \
    m.gpu_memory_total_bytes > 0 && m.gpu_ecc_corrected >= 0, kGpuEccHelp)                                            \
  X(int64_t, gpu_ecc_uncorrected, -1, "trainyard_job_gpu_ecc_errors", kGauge, "type=uncorrected",                     \
    m.gpu_memory_total_bytes > 0 && m.gpu_ecc_uncorrected >= 0, kGpuEccHelp)                                          \
  X(int64_t, gpu_xid_errors, 0, "trainyard_job_gpu_xid_errors_total", kCounter, "", m.gpu_memory_total_bytes > 0,     \
    "Xid critical errors the driver reported for the rank's GPU while the rank ran (NVML events)")                    \
  X(int64_t, gpu_last_xid, 0, "trainyard_job_gpu_last_xid", kGauge, "", m.gpu_memory_total_bytes > 0,                 \
    "The last Xid error code reported for the rank's GPU (0: none)")                                                  \
  X(int32_t, attention_backend, -1, "trainyard_job_attention_backend", kGauge, "", m.attention_backend >= 0,          \
    "The attention kernel (SDPA) the model runs: 0 math, 1 flash, 2 efficient, 3 cudnn (ATen's SDPBackend)")          \
  X(double, model_flops, 0, "", kNone, "", true, "")                                                                  \
  X(double, peak_flops, 0, "", kNone, "", true, "")                                                                   \
  X(int64_t, unix_millis, 0, "", kNone, "", true, "")                                                                 \
  X(int64_t, total_steps, 0, "", kNone, "", true, "")

// What the numbers above mean, where several share a family.
//   step_seconds: wall time of the whole step; data_seconds: waiting for the
//   batch; compute_seconds: forward + backward (with DDP's overlapped
//   allreduce); optimizer_seconds: the optimizer step; forward_seconds: the
//   forward passes and losses alone (part of compute; no collective in them
//   for DDP models without buffers: a rank's own speed).
//   comm_*: DDP gradient communication this step. *_bytes held: bytes this
//   rank holds at the end of the step (unique storages); device_*: the CUDA
//   allocator's (0 on the CPU). allgather/reduce_scatter: FSDP collectives
//   this step. model_flops: 3x the step's forward pass as PyTorch's profiler
//   counts it (worker/model_flops.h), 0 when not counted; peak_flops: the
//   device's peak FLOP/s at the job's precision (0: unknown, or a CPU).
//   gpu_*: the rank's GPU as NVML reads it every few seconds
//   (worker/gpu_monitor.h): the latest reading rides on the next step; -1
//   where the driver gives none, and every gpu_* is -1 without NVML (a CPU
//   job, a machine without the NVIDIA driver), when none is exported.
//   total_steps: the steps the job will run, as a script says it
//   (trainyard.report(step, total=N)); 0: not said (the spec's max_steps
//   is the job's length).
inline constexpr const char* kStepPhasesHelp =
    "Step time by phase: step (whole), data, compute (forward+backward with overlapped gradient communication), "
    "optimizer";
inline constexpr const char* kMemoryHelp =
    "Bytes a rank holds, by kind: parameters, gradients, optimizer state (tensor storages)";
inline constexpr const char* kGpuMemoryHelp =
    "Device memory of the rank's GPU as the driver counts it (NVML; every process on the GPU), by kind: used, total";
inline constexpr const char* kGpuEccHelp =
    "ECC memory errors of the rank's GPU since the driver loaded (NVML volatile counts), by type: corrected, "
    "uncorrected";
inline constexpr const char* kFsdpBytesHelp = "FSDP collective payload, by op: all_gather, reduce_scatter";

struct StepMetrics {
#define TRAINYARD_STEP_MEMBER(type, name, init, ...) type name = init;
  TRAINYARD_STEP_NUMBERS(TRAINYARD_STEP_MEMBER)
#undef TRAINYARD_STEP_MEMBER
  // Named numbers of the step beyond the list (a script's
  // trainyard.report(**values)): trainyard_job_value{name}.
  std::map<std::string, double> values;
};

// Model FLOPs utilization of the step: model_flops / step_seconds / peak,
// where the peak is `peak_override` when it is > 0 (the coordinator's
// --peak-flops), else the rank's own peak_flops. NaN when a number is
// missing. The one definition of MFU (/metrics, the job history, benches).
inline double ModelFlopsUtilization(const StepMetrics& m, double peak_override = 0) {
  const double peak = peak_override > 0 ? peak_override : m.peak_flops;
  if (m.model_flops <= 0 || m.step_seconds <= 0 || peak <= 0) return std::nan("");
  return m.model_flops / m.step_seconds / peak;
}

// One checkpoint a job saved (or failed to save), as rank 0 reports it.
struct CheckpointEvent {
  int64_t index = -1;                           // N of checkpoint_<N>
  int64_t step = 0;                             // optimizer steps completed when it was taken
  CheckpointType type = CheckpointType::kFull;  // kFull or kSharded
  std::string trigger;                          // "periodic", "request", "final", "cancel", "preemption"
  int64_t request_id = 0;                       // of a remote request; 0 otherwise
  std::string path;                             // the committed directory
  int64_t bytes = 0;                            // every file of it
  double seconds = 0;                           // wall time of the save, start to commit
  double blocking_seconds = 0;                  // of which training waited (all of it unless async)
  int64_t host_bytes = 0;                       // host memory of an async save's copy (rank 0)
  int64_t unix_millis = 0;                      // when it was committed
  bool ok = false;
  std::string error;     // why it failed (nothing is left as "latest")
  bool refused = false;  // not attempted: the job cannot save on request (a script without trainyard)
};

// Receives every step's metrics, checkpoint outcomes and notes from a
// rank's training thread (notes also from its data loader's threads).
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  virtual void OnStep(const StepMetrics& metrics) = 0;
  virtual void OnCheckpoint(const CheckpointEvent& /*event*/) {}
  // Something the people running the job should see among its events (what
  // a resume or init_from skipped, unreadable images skipped, ...).
  // Thread-safe.
  virtual void OnNote(const std::string& /*text*/) {}
};

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_STEP_METRICS_H_
