// ResourcePool: the CPU slots and GPUs of the coordinator's host that local
// jobs run on — a CPU job's ranks take one slot each, a CUDA job's ranks one
// GPU each (a GPU is shared only with --ranks-per-gpu above 1, ranks of one
// job first). Jobs on Slurm or external workers take none.
//
// Not thread-safe: the Scheduler owns it and decides in what order jobs
// take from it.
#ifndef TRAINYARD_SERVER_SCHEDULING_RESOURCE_POOL_H_
#define TRAINYARD_SERVER_SCHEDULING_RESOURCE_POOL_H_

#include <set>
#include <vector>

namespace trainyard {

class ResourcePool {
 public:
  enum class Kind { kSlots, kGpus };
  // "slots" or "GPUs", for messages.
  static const char* NameOf(Kind kind) { return kind == Kind::kGpus ? "GPUs" : "slots"; }

  // What one job holds; empty when it holds nothing.
  struct Held {
    int slots = 0;
    std::vector<int> gpus;  // ids, in the order the ranks get them (repeated when ranks share a GPU)
  };

  // Each of `gpus` GPUs (ids 0..gpus-1) can be taken by `ranks_per_gpu`
  // ranks at once.
  ResourcePool(int slots, int gpus, int ranks_per_gpu = 1);

  bool Fits(Kind kind, int count) const;
  // Takes `count` slots or GPUs; REQUIRES Fits(kind, count). With `partial`,
  // as many as are free (a job found running after a coordinator restart
  // holds as many as it has ranks, when they are there).
  Held Take(Kind kind, int count, bool partial = false);
  // Gives back what `held` holds and empties it.
  void Release(Held* held);
  // An elastic job's ranks come and go from the top (rank r has the r-th
  // slot or GPU): Grow adds `count` more of `kind` after what `held` has
  // (REQUIRES Fits(kind, count)); Shrink gives back its last `count`.
  void Grow(Held* held, Kind kind, int count);
  void Shrink(Held* held, int count);

  int free_slots() const { return free_slots_; }
  int free_gpus() const { return static_cast<int>(free_gpus_.size()); }
  int free(Kind kind) const { return kind == Kind::kGpus ? free_gpus() : free_slots(); }

 private:
  int free_slots_;
  std::multiset<int> free_gpus_;  // a GPU's id once per rank it can still take
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULING_RESOURCE_POOL_H_
