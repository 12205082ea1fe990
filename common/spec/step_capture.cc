#include "common/spec/step_capture.h"

namespace trainyard {

std::string StepCaptureRefusal(const JobSpec& s) {
  if (!s.script.path.empty()) return "a script job runs the user's own step (script)";
  if (s.device != Device::kCuda) return "device is cpu; a CUDA graph holds CUDA work";
  if (s.distributed_type == DistributedType::kFsdp) {
    return "distributed_type FSDP gathers and frees its shards with host code each step";
  }
  const bool several = s.num_processes > 1 || s.elastic.min_processes > 0;
  if (several && s.backend == Backend::kGloo)
    return "backend gloo: Gloo's collectives run on the host (NCCL's are captured)";
  if (s.mixed_precision == MixedPrecision::kFp16) {
    return "mixed_precision fp16 scales the loss, reading the gradients' finiteness on the host each step (bf16 "
           "needs no scaling)";
  }
  if (s.optimizer.kind != OptimizerKind::kAdamW || !s.fused.optimizer) {
    return "the optimizer takes its learning rate as a host number (only fused AdamW, optimizer.kind adamw with "
           "fused.optimizer, takes it as a device tensor)";
  }
  if (several && s.distributed_type == DistributedType::kDdp) {
    if (s.ddp.find_unused_parameters)
      return "ddp.find_unused_parameters walks the autograd graph on the host each step";
    if (s.ddp.comm_hook != CommHookType::kNone) {
      return "ddp.comm_hook runs host code as each bucket's allreduce completes (the built-in allreduce does not)";
    }
  }
  if (s.replicas()) return "fault_tolerance.mode replica changes the process group while training";
  if (s.elastic.min_processes > 0) return "an elastic job (elastic.min_processes) changes its group while training";
  return "";
}

}  // namespace trainyard
