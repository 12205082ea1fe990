// Whether a job's training step can be captured as one CUDA graph
// (fused.cuda_graph): the spec's side of the rule. The worker's captured
// step (worker/train/captured_step.h) runs a batch of another shape (an
// epoch's last) uncaptured.
#ifndef TRAINYARD_COMMON_SPEC_STEP_CAPTURE_H_
#define TRAINYARD_COMMON_SPEC_STEP_CAPTURE_H_

#include <string>

#include "common/spec/job_spec.h"

namespace trainyard {

// Why `spec`'s step cannot be captured, naming the field, or empty when it
// can. A captured step replays the same kernels on the same buffers with no
// host code between them, so it needs: a CUDA device; one process, or DDP
// over NCCL with its built-in allreduce (Gloo's collectives run on the
// host; a comm hook runs host code when each bucket completes); no FSDP
// (shards gathered and freed step by step), fp16 loss scaling (the step
// reads the gradients' finiteness on the host), find_unused_parameters
// (a walk of the autograd graph each step), replicas or elastic
// membership (the groups change while training); and fused AdamW, the one
// optimizer here that takes its learning rate as a device tensor.
std::string StepCaptureRefusal(const JobSpec& spec);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_STEP_CAPTURE_H_
