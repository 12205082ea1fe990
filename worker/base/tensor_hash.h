// HashTensors: a digest of tensors' bytes, to tell whether ranks hold the
// same state (replica hashes in logs, the heal's check of what it received).
#ifndef TRAINYARD_WORKER_BASE_TENSOR_HASH_H_
#define TRAINYARD_WORKER_BASE_TENSOR_HASH_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace trainyard {

// FNV-1a (64-bit) over the bytes of `tensors` in order, taken 8 bytes at a
// time (copied to contiguous host memory). Not a cryptographic digest: it
// finds corruption and divergence, not a forger.
uint64_t HashTensors(const std::vector<at::Tensor>& tensors);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_BASE_TENSOR_HASH_H_
