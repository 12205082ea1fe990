// NCCL process group for CUDA devices. Compiled only when LibTorch has CUDA
// (TRAINYARD_WITH_NCCL); on CPU-only machines CI checks it with
// -fsyntax-only against the CUDA toolkit headers (tests/cuda_syntax_check.sh).
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "worker/process_group.h"

namespace trainyard {

c10::intrusive_ptr<c10d::ProcessGroup> MakeNcclProcessGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                            int32_t rank, int32_t world_size,
                                                            std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  options->is_high_priority_stream = false;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

}  // namespace trainyard
