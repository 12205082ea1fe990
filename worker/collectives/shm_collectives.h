// ShmCollectives: allreduce among the ranks of one host through a POSIX
// shared-memory segment, without sockets or thread hand-offs (one of the
// DirectCollectives; NodeCollectives uses one per host).
//
// On one host, Gloo's TCP allreduce is latency-bound (about 1.8 ms for
// 400 KB between two processes on loopback, with 4 ms tails from thread
// wake-ups); this path copies each rank's tensor into the segment, lets each
// rank sum one slice of every rank's copy, and copies the sums back — two
// spin barriers per chunk. Tensors that already live in the resident area
// (ReserveResident: DDP's gradient buckets) skip the copies: each rank sums
// its slice across every rank's copy and writes the result into all of them.
//
// Every rank must call the collectives in the same order (as with any
// process group). Not thread-safe: one calling thread per rank. A peer whose
// process ends, or that does not arrive within the timeout, makes the call
// throw ShmAborted.
#ifndef TRAINYARD_WORKER_COLLECTIVES_SHM_COLLECTIVES_H_
#define TRAINYARD_WORKER_COLLECTIVES_SHM_COLLECTIVES_H_

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/collectives/direct_collectives.h"

namespace trainyard {

class FlightRecorder;

// What a collective or a segment's rendezvous throws when a peer will not
// arrive: its process ended (checked every millisecond of waiting for it),
// the timeout passed, or (rendezvous) `abort` of Create said to give up.
class ShmAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShmCollectives final : public DirectCollectives {
 public:
  // Collective over all ranks: rank 0 creates the segment and publishes its
  // name in `store` under `key_prefix`; the segment is unlinked as soon as
  // every rank has mapped it, so nothing outlives the processes. `store` is
  // kept for ReserveResident.
  // `chunk_bytes` bounds the segment (tensors larger than it go in chunks).
  // A peer whose process ended, or that does not arrive within `timeout`,
  // makes a call throw ShmAborted. `abort` (when given) is asked while this
  // and ReserveResident wait for the peers to map a segment: true gives up
  // (a replica job's groups, once the coordinator offered a newer
  // membership).
  static std::unique_ptr<ShmCollectives> Create(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                int32_t world_size, const std::string& key_prefix,
                                                size_t chunk_bytes = 128 << 10,
                                                std::chrono::milliseconds timeout = std::chrono::minutes(5),
                                                std::function<bool()> abort = nullptr);
  // True when every rank runs on this host (same hostname and boot id), the
  // condition for Create. Collective over all ranks; uses `store`.
  static bool AllRanksOnThisHost(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank, int32_t world_size,
                                 const std::string& key_prefix);
  // For every rank, the index of its host (same hostname and boot id)
  // among the ranks' hosts in order of first appearance: all zeros when
  // every rank is on one host. Collective over all ranks; uses `store`.
  static std::vector<int32_t> HostOfEachRank(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                             int32_t world_size, const std::string& key_prefix);
  ~ShmCollectives() override;

  // In-place sum over all ranks of a contiguous fp32 CPU tensor, divided by
  // `divisor` (the world size for a mean) in the same pass. Every rank gets
  // bitwise the same result: the sum in rank order, then the division.
  // A tensor inside this rank's resident area must be at the same offset on
  // every rank (checked: ranks that disagree get an error, not a wrong sum).
  void AllreduceSum(at::Tensor& tensor, float divisor = 1.0f) override;

  // Maps (collective) a resident area of `bytes_per_rank` for every rank,
  // each rank's readable and writable by all: memory for tensors that are
  // reduced often, such as gradient buckets (one owner at a time: DDP's).
  // Keeps the current area when it is large enough; a new one replaces it
  // otherwise (its contents are not carried over). False on every rank when
  // any rank cannot map it (resident_error() says why, where known).
  bool ReserveResident(size_t bytes_per_rank) override;
  // Rank `rank`'s part of the resident area (nullptr before ReserveResident).
  void* resident(int32_t rank) const;
  void* own_resident() const override { return resident(rank_); }
  size_t resident_bytes() const { return resident_stride_; }  // per rank
  const std::string& resident_error() const override { return resident_error_; }
  // A CPU DataPtr to `data` (in the resident area) that keeps the area
  // mapped while it lives, even after this object or a replaced area: for
  // storages moved into the area.
  c10::DataPtr ResidentDataPtr(void* data) const override;

  // Copies `bytes` bytes at `data` from rank `root` to every other rank.
  void Broadcast(void* data, size_t bytes, int32_t root) override;

  // In-place elementwise maximum over all ranks of `n` ≤ kMaxWords values
  // (the trainer's per-step control word): one barrier.
  void AllreduceMax(int64_t* values, int n) override;

  // Records AllreduceSum, Broadcast and AllreduceMax as group "shm" in
  // `recorder` (null: nothing), which must outlive this object.
  void set_flight_recorder(FlightRecorder* recorder) { recorder_ = recorder; }

  int32_t rank() const override { return rank_; }
  int32_t world_size() const override { return world_; }

 private:
  // AllreduceMax without recording it (a part of another collective).
  void MaxOfWords(int64_t* values, int n);
  ShmCollectives(int32_t rank, int32_t world, void* base, size_t bytes, size_t chunk_floats,
                 std::chrono::milliseconds timeout);
  void Barrier();
  void AllreduceResident(size_t offset, size_t n, float divisor);

  int32_t rank_;
  int32_t world_;
  void* base_;
  size_t mapped_bytes_;
  size_t chunk_floats_;
  std::chrono::milliseconds timeout_;
  std::function<bool()> abort_;  // may be empty; asked by ReserveResident
  uint64_t pidns_ = 0;           // this process's pid namespace
  FlightRecorder* recorder_ = nullptr;
  uint64_t word_calls_ = 0;                // AllreduceMax alternates between two buffers
  uint64_t epoch_ = 0;                     // barriers passed so far
  c10::intrusive_ptr<c10d::Store> store_;  // for segments mapped later
  std::string key_prefix_;
  std::shared_ptr<void> resident_map_;  // unmaps the area when the last user goes
  char* resident_ = nullptr;            // world parts of resident_stride_ bytes
  size_t resident_stride_ = 0;
  int resident_segments_ = 0;
  std::string resident_error_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_COLLECTIVES_SHM_COLLECTIVES_H_
