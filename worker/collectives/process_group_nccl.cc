// The NCCL backend. Compiled and linked in every build against a CUDA torch
// (TRAINYARD_WITH_CUDA); it runs only where a GPU is visible.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "worker/collectives/process_group.h"

namespace trainyard {

c10::intrusive_ptr<c10d::Backend> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                  int32_t world_size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  options->is_high_priority_stream = false;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

}  // namespace trainyard
