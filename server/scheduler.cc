#include "server/scheduler.h"

#include <algorithm>
#include <set>

namespace trainyard {

Scheduler::Scheduler(int slots, int gpus) : pool_(slots, gpus) {}

void Scheduler::Enqueue(const std::string& id, Demand demand, Time not_before, bool ahead) {
  Remove(id);
  Waiting w{id, demand, not_before};
  if (ahead) {
    queue_.push_front(std::move(w));
  } else {
    queue_.push_back(std::move(w));
  }
}

bool Scheduler::Remove(const std::string& id) {
  auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Waiting& w) { return w.id == id; });
  if (it == queue_.end()) return false;
  queue_.erase(it);
  return true;
}

bool Scheduler::queued(const std::string& id) const {
  return std::any_of(queue_.begin(), queue_.end(), [&](const Waiting& w) { return w.id == id; });
}

std::vector<std::string> Scheduler::Schedule(Time now) {
  std::vector<std::string> started;
  if (paused_) return started;
  // A resource whose earliest waiting job does not fit: later jobs that
  // need it wait behind that one.
  std::set<ResourcePool::Kind> blocked;
  for (auto it = queue_.begin(); it != queue_.end();) {
    const Waiting& w = *it;
    if (now < w.not_before) {  // backing off: takes nothing, blocks nobody
      ++it;
      continue;
    }
    if (w.demand.local) {
      if (blocked.count(w.demand.kind) || !pool_.Fits(w.demand.kind, w.demand.count)) {
        blocked.insert(w.demand.kind);
        ++it;
        continue;
      }
      held_[w.id] = pool_.Take(w.demand.kind, w.demand.count);
    }
    started.push_back(w.id);
    it = queue_.erase(it);
  }
  return started;
}

const ResourcePool::Held& Scheduler::Held(const std::string& id) const {
  static const ResourcePool::Held kNothing;
  auto it = held_.find(id);
  return it == held_.end() ? kNothing : it->second;
}

void Scheduler::HoldAdopted(const std::string& id, Demand demand) {
  if (!demand.local) return;
  Release(id);
  // Its ranks run whatever is free: slots may be over-committed until they
  // end; GPUs are held as far as they go.
  held_[id] = pool_.Take(demand.kind, demand.count, /*partial=*/demand.kind == ResourcePool::Kind::kGpus);
}

void Scheduler::Release(const std::string& id) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  pool_.Release(&it->second);
  held_.erase(it);
}

}  // namespace trainyard
