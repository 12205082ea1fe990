#include "server/scheduling/resource_pool.h"

#include <algorithm>

namespace trainyard {

ResourcePool::ResourcePool(int slots, int gpus, int ranks_per_gpu) : free_slots_(slots) {
  for (int g = 0; g < gpus; ++g) {
    for (int k = 0; k < ranks_per_gpu; ++k) free_gpus_.insert(g);
  }
}

bool ResourcePool::Fits(Kind kind, int count) const {
  return kind == Kind::kGpus ? count <= free_gpus() : count <= free_slots_;
}

ResourcePool::Held ResourcePool::Take(Kind kind, int count, bool partial) {
  Held held;
  if (kind == Kind::kSlots) {
    held.slots = partial ? std::min(count, std::max(free_slots_, 0)) : count;
    free_slots_ -= held.slots;
    return held;
  }
  for (int i = 0; i < count && !free_gpus_.empty(); ++i) {
    held.gpus.push_back(*free_gpus_.begin());
    free_gpus_.erase(free_gpus_.begin());
  }
  return held;
}

void ResourcePool::Release(Held* held) {
  free_slots_ += held->slots;
  held->slots = 0;
  for (int g : held->gpus) free_gpus_.insert(g);
  held->gpus.clear();
}

void ResourcePool::Grow(Held* held, Kind kind, int count) {
  Held more = Take(kind, count);
  held->slots += more.slots;
  held->gpus.insert(held->gpus.end(), more.gpus.begin(), more.gpus.end());
}

void ResourcePool::Shrink(Held* held, int count) {
  Held tail;
  if (held->gpus.empty()) {
    tail.slots = std::min(count, held->slots);
    held->slots -= tail.slots;
  } else {
    const size_t n = std::min(static_cast<size_t>(std::max(count, 0)), held->gpus.size());
    tail.gpus.assign(held->gpus.end() - static_cast<std::ptrdiff_t>(n), held->gpus.end());
    held->gpus.resize(held->gpus.size() - n);
  }
  Release(&tail);
}

}  // namespace trainyard
