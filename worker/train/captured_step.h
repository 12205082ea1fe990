// The captured step (fused.cuda_graph): the Trainer's step recorded once as
// a CUDA graph and replayed, as PyTorch's whole-network capture does
// (torch.cuda.graphs' notes). The training thread moves to a stream of its
// own; the first steps run eagerly on it (3, or 11 under DDP: c10d's
// Reducer rebuilds its buckets on the second step and times its first ten
// with CUDA events read on the host); then one step is captured — every
// micro-batch's forward, loss and backward (NCCL's allreduce included),
// the gradients' norm and clipping with no host read (_foreach_norm), and
// fused AdamW with its learning rate in a device tensor — and replayed at
// once. Each later step copies its batches into the graph's input buffers,
// sets the learning rate tensor, replays, and reads the loss (and norm).
//
// A batch of another shape than the captured one (an epoch's last, smaller
// batch) runs uncaptured, said once; the graph is made from full batches
// only. A step whose parameters or optimizer state were replaced (a
// checkpoint loaded) is captured again. Under fused.cuda_graph auto a capture that fails
// leaves the job eager (said once in its events); under on it fails the
// step.
#ifndef TRAINYARD_WORKER_TRAIN_CAPTURED_STEP_H_
#define TRAINYARD_WORKER_TRAIN_CAPTURED_STEP_H_

#include <functional>
#include <memory>
#include <string>

#include "worker/train/step_engine.h"

namespace trainyard {

// The captured engine over `parts` (a CUDA device, a spec that
// StepCaptureRefusal passes), running `eager` before and instead of the
// graph as above. In a build without CUDA: `eager` under auto (said to
// `note`), std::invalid_argument under on.
std::unique_ptr<StepEngine> MakeCapturedStep(TrainerParts* parts, std::unique_ptr<StepEngine> eager,
                                             const std::function<void(const std::string&)>& note);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_TRAIN_CAPTURED_STEP_H_
