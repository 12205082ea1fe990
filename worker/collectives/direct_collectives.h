// DirectCollectives: the collectives DDP's plain fp32 gradients, its
// buffers and the per-step control word use when they bypass the process
// group. Two kinds: ShmCollectives (every rank on one host, through one
// shared-memory segment) and NodeCollectives (shared memory within each
// host, a process group across hosts).
//
// Every rank calls the collectives in the same order (as with any process
// group); one calling thread per rank. A peer that ends or does not arrive
// makes a call throw (ShmAborted within a host, c10::Error across hosts).
#ifndef TRAINYARD_WORKER_COLLECTIVES_DIRECT_COLLECTIVES_H_
#define TRAINYARD_WORKER_COLLECTIVES_DIRECT_COLLECTIVES_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace trainyard {

class DirectCollectives {
 public:
  virtual ~DirectCollectives() = default;

  // In-place sum over all ranks of a contiguous fp32 CPU tensor, divided by
  // `divisor` (the world size for a mean). Every rank gets bitwise the same
  // result.
  virtual void AllreduceSum(at::Tensor& tensor, float divisor = 1.0f) = 0;

  // Copies `bytes` bytes at `data` from rank `root` to every other rank.
  virtual void Broadcast(void* data, size_t bytes, int32_t root) = 0;

  // In-place elementwise maximum over all ranks of `n` ≤ kMaxWords values.
  static constexpr int kMaxWords = 8;
  virtual void AllreduceMax(int64_t* values, int n) = 0;

  // A resident area for this rank: memory AllreduceSum reads in place
  // instead of copying (DDP moves its gradient buckets there). Collective;
  // false when it cannot be had (resident_error() says why, where known).
  // A tensor in the area must be at the same offset on every rank.
  virtual bool ReserveResident(size_t bytes_per_rank) = 0;
  // This rank's resident area (nullptr before ReserveResident).
  virtual void* own_resident() const = 0;
  virtual const std::string& resident_error() const = 0;
  // A CPU DataPtr to `data` (in this rank's resident area) that keeps the
  // area mapped while it lives.
  virtual c10::DataPtr ResidentDataPtr(void* data) const = 0;

  virtual int32_t rank() const = 0;
  virtual int32_t world_size() const = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_DIRECT_COLLECTIVES_H_
