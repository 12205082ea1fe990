#include "worker/train/step_recorder.h"

#include "common/clock.h"
#include "worker/base/device.h"
#include "worker/parallel/ddp.h"
#include "worker/parallel/fsdp.h"

namespace trainyard {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

StepRecorder::StepRecorder(int32_t rank, c10::Device device, const DistributedDataParallel* ddp,
                           const FullyShardedModel* fsdp)
    : rank_(rank), device_(device), ddp_(ddp), fsdp_(fsdp) {}

StepMetrics StepRecorder::Record(const StepSample& s) {
  StepMetrics m = s.numbers;
  m.rank = rank_;
  m.data_seconds = Seconds(s.data);
  m.compute_seconds = Seconds(s.compute);
  m.optimizer_seconds = Seconds(s.optimizer);
  m.forward_seconds = Seconds(s.forward);
  m.step_seconds = Seconds(s.total);
  m.samples_per_second = m.step_seconds > 0 ? m.samples / m.step_seconds : 0;
  if (const auto device_memory = ReadDeviceMemory(device_)) {
    m.device_allocated_bytes = device_memory->allocated;
    m.device_peak_bytes = device_memory->peak_allocated;
  }
  if (fsdp_ != nullptr) {
    const auto& c = fsdp_->comm();
    m.allgather_bytes = c.allgather_bytes - allgather_;
    m.reduce_scatter_bytes = c.reduce_scatter_bytes - reduce_scatter_;
    m.sharded_comm_seconds = static_cast<double>(c.nanos - sharded_nanos_) * 1e-9;
    allgather_ = c.allgather_bytes;
    reduce_scatter_ = c.reduce_scatter_bytes;
    sharded_nanos_ = c.nanos;
  }
  if (ddp_ != nullptr) {
    const CommStats& cs = ddp_->comm_stats();
    const int64_t wire = cs.wire_bytes.load(), fp32 = cs.fp32_equivalent_bytes.load(), nanos = cs.hook_nanos.load();
    m.comm_wire_bytes = wire - wire_;
    m.comm_fp32_bytes = fp32 - fp32_;
    m.comm_hook_seconds = static_cast<double>(nanos - hook_nanos_) * 1e-9;
    wire_ = wire;
    fp32_ = fp32;
    hook_nanos_ = nanos;
  }
  m.unix_millis = NowMillis();
  return m;
}

}  // namespace trainyard
