// DDP communication hooks: how gradient buckets travel between ranks.
//
// One class per hook, all over c10d::CommHookInterface, plugged into PyTorch's
// own Reducer: Fp16CompressHook, Bf16CompressHook, PowerSgdHook (per tensor,
// optionally batching tensors of the same shape) and BatchedPowerSgdHook
// (the whole bucket as one square matrix). A comm_wrapper (fp16/bf16) sets
// the precision in which PowerSGD's P, Q and uncompressed tensors travel.
//
// Collective order: every rank must issue its collectives in the same order
// (Gloo matches operations by sequence). Hooks therefore never issue a
// collective from a completion callback: runHook hands the bucket to one
// communication thread per hook, which serves buckets in the order the
// Reducer launches them (bucket index order, identical on every rank) and
// runs each bucket's collectives to completion, one after another, while the
// autograd thread keeps computing. Hooks are used by one Reducer; State() and
// LoadState() must be called between steps (no bucket in flight).
#ifndef TRAINYARD_WORKER_PARALLEL_COMM_HOOKS_H_
#define TRAINYARD_WORKER_PARALLEL_COMM_HOOKS_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "common/job_spec.h"

namespace trainyard {

// Cumulative gradient-communication counters of one rank. Thread-safe.
struct CommStats {
  std::atomic<int64_t> wire_bytes{0};             // payload bytes handed to collectives
  std::atomic<int64_t> fp32_equivalent_bytes{0};  // what plain fp32 allreduce would carry
  std::atomic<int64_t> hook_nanos{0};             // time inside hooks (communication thread)
};

// The precision a tensor travels in.
enum class WireDtype { kFp32, kFp16, kBf16 };

// Collectives for hooks, over a process group. Called from one thread.
class GradientComm {
 public:
  GradientComm(c10::intrusive_ptr<c10d::ProcessGroup> process_group, CommStats* stats);

  // In-place sum over all ranks of a contiguous fp32 tensor, carried on the
  // wire as `wire` (the backend's own fp16/bf16 allreduce: Gloo and NCCL
  // reduce both).
  void AllreduceSum(at::Tensor& tensor, WireDtype wire);
  int32_t world_size() const { return world_size_; }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  CommStats* stats_;
  int32_t world_size_;
};

class CommHook : public c10d::CommHookInterface {
 public:
  // Named tensors of the hook's state (PowerSGD: iteration, error feedback,
  // P and Q memories, RNG position); empty for stateless hooks. For
  // checkpoints: LoadState(State()) restores the hook exactly.
  virtual std::map<std::string, at::Tensor> State() const = 0;
  virtual void LoadState(const std::map<std::string, at::Tensor>& state) = 0;
};

// Builds the hook selected by `spec.comm_hook` (null for kNone).
std::unique_ptr<CommHook> MakeCommHook(const DdpSpec& spec, c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                                       CommStats* stats);

// PowerSGD's Gram-Schmidt orthogonalization of the columns of each matrix in
// a [batch, rows, cols] tensor, in place. With epsilon 0 an all-zero column
// stays zero (PyTorch would produce NaN).
void OrthogonalizeColumns(at::Tensor& matrices, double epsilon);

// What PowerSGD orthogonalizes with, as PyTorch's hook chooses: Gram-Schmidt
// (OrthogonalizeColumns) for at most 2 columns or half precision, else the
// Q of a Householder QR, whose columns stay orthogonal to rounding even when
// the matrices have a lower rank than their columns (Gram-Schmidt's do not:
// a rank above the gradient's then makes the approximation ~1e-3 off in
// fp32). Rows ≥ cols. In place.
void Orthogonalize(at::Tensor& matrices, double epsilon);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_PARALLEL_COMM_HOOKS_H_
