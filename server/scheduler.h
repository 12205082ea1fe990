// Scheduler: the jobs waiting to start, the resources of this host that
// local jobs take (ResourcePool), what each job holds, and the decision
// which waiting jobs start now.
//
// Today's policy: first come, first served within each resource — a job
// waits only behind earlier jobs that need the same kind (CPU slots or
// GPUs); Slurm and external jobs take neither and start at once; a job
// requeued after a failure or preemption goes before jobs that have not
// started; a job backing off after repeated failures takes nothing and
// blocks nobody until its time comes.
//
// Deterministic: the time is passed in. Not thread-safe: the JobManager
// calls it under its mutex.
#ifndef TRAINYARD_SERVER_SCHEDULER_H_
#define TRAINYARD_SERVER_SCHEDULER_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "server/resource_pool.h"

namespace trainyard {

// What one job takes from this host while it runs.
struct Demand {
  // Local jobs take `count` of `kind`; the others take nothing here.
  bool local = false;
  ResourcePool::Kind kind = ResourcePool::Kind::kSlots;
  int count = 0;
};

class Scheduler {
 public:
  using Time = std::chrono::steady_clock::time_point;

  Scheduler(int slots, int gpus);

  // Queues job `id`; it does not start before `not_before`. `ahead`: before
  // every job that has not started yet (a requeued job resumes first).
  void Enqueue(const std::string& id, Demand demand, Time not_before = {}, bool ahead = false);
  // Takes `id` out of the queue; false when it was not queued.
  bool Remove(const std::string& id);
  bool queued(const std::string& id) const;
  size_t size() const { return queue_.size(); }

  // The waiting jobs that start at `now`, in the order they start; each
  // has taken what it needs (Held). Nothing starts once Pause() was called.
  std::vector<std::string> Schedule(Time now);

  // What job `id` holds (empty when nothing).
  const ResourcePool::Held& Held(const std::string& id) const;
  // A job found running after a coordinator restart holds what it needs
  // (slots even beyond what is free; GPUs as far as they go: which ones it
  // had is not stored).
  void HoldAdopted(const std::string& id, Demand demand);
  // Gives back what `id` holds.
  void Release(const std::string& id);

  // Starts nothing from now on (the coordinator is stopping).
  void Pause() { paused_ = true; }

  int free_slots() const { return pool_.free_slots(); }
  int free_gpus() const { return pool_.free_gpus(); }

 private:
  struct Waiting {
    std::string id;
    Demand demand;
    Time not_before;
  };

  ResourcePool pool_;
  std::deque<Waiting> queue_;
  std::map<std::string, ResourcePool::Held> held_;
  bool paused_ = false;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULER_H_
