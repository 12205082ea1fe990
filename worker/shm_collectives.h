// ShmCollectives: allreduce among the ranks of one host through a POSIX
// shared-memory segment, without sockets or thread hand-offs.
//
// On one host, Gloo's TCP allreduce is latency-bound (about 1.8 ms for
// 400 KB between two processes on loopback, with 4 ms tails from thread
// wake-ups); this path copies each rank's tensor into the segment, lets each
// rank sum one slice of every rank's copy, and copies the sums back — two
// spin barriers and three memory passes.
//
// Every rank must call the collectives in the same order (as with any
// process group). Not thread-safe: one calling thread per rank. A peer that
// does not arrive within the timeout makes the call throw.
#ifndef TRAINYARD_WORKER_SHM_COLLECTIVES_H_
#define TRAINYARD_WORKER_SHM_COLLECTIVES_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace trainyard {

class ShmCollectives {
 public:
  // Collective over all ranks: rank 0 creates the segment and publishes its
  // name in `store` under `key_prefix`; the segment is unlinked as soon as
  // every rank has mapped it, so nothing outlives the processes.
  // `chunk_bytes` bounds the segment (tensors larger than it go in chunks).
  static std::unique_ptr<ShmCollectives> Create(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                int32_t world_size, const std::string& key_prefix,
                                                size_t chunk_bytes = 128 << 10,
                                                std::chrono::milliseconds timeout = std::chrono::minutes(5));
  // True when every rank runs on this host (same hostname and boot id), the
  // condition for Create. Collective over all ranks; uses `store`.
  static bool AllRanksOnThisHost(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank, int32_t world_size,
                                 const std::string& key_prefix);
  ~ShmCollectives();

  // In-place sum over all ranks of a contiguous fp32 CPU tensor, divided by
  // `divisor` (the world size for a mean) in the same pass. Every rank gets
  // bitwise the same result: the sum in rank order, then the division.
  void AllreduceSum(at::Tensor& tensor, float divisor = 1.0f);

  // Copies `bytes` bytes at `data` from rank `root` to every other rank.
  void Broadcast(void* data, size_t bytes, int32_t root);

  // In-place elementwise maximum over all ranks of `n` ≤ kMaxWords values
  // (the trainer's per-step control word): one barrier.
  static constexpr int kMaxWords = 8;
  void AllreduceMax(int64_t* values, int n);

  int32_t rank() const { return rank_; }
  int32_t world_size() const { return world_; }

 private:
  ShmCollectives(int32_t rank, int32_t world, void* base, size_t bytes, size_t chunk_floats,
                 std::chrono::milliseconds timeout);
  void Barrier();

  int32_t rank_;
  int32_t world_;
  void* base_;
  size_t mapped_bytes_;
  size_t chunk_floats_;
  std::chrono::milliseconds timeout_;
  uint64_t word_calls_ = 0;  // AllreduceMax alternates between two buffers
  uint64_t epoch_ = 0;  // barriers passed so far
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_SHM_COLLECTIVES_H_
