#include "worker/data/data_loader.h"

#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

namespace trainyard {

struct DataLoader::Prefetch {
  int workers = 0;
  size_t capacity = 1;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;                       // guarded by mu
  int64_t next_seq = 0, consumed_seq = 0;  // guarded by mu
  // Where the workers plan the next batch from; guarded by mu.
  int64_t epoch = 0, offset = 0;
  std::vector<int64_t> indices;
  struct Result {
    Batch batch;
    int64_t epoch = 0, end = 0;
    std::exception_ptr error;
  };
  std::map<int64_t, Result> ready;  // by sequence number; guarded by mu
  std::vector<std::thread> threads;
};

struct DataLoader::Cursor {
  GlobalCursorSampler sampler;
  int64_t limit = 0;
  int32_t member = 0, members = 1;
  int64_t committed = 0, read = 0;
  std::vector<int64_t> reading, committed_positions;  // of the reads since the last commit, of the last commit
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DistributedSampler sampler, int64_t batch_size,
                       int num_workers, int prefetch_batches)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), batch_size_(batch_size) {
  indices_ = sampler_.Indices(epoch_);
  if (num_workers > 0) {
    prefetch_ = std::make_unique<Prefetch>();
    prefetch_->workers = num_workers;
    prefetch_->capacity = static_cast<size_t>(std::max(std::max(prefetch_batches, num_workers), 1));
    StartWorkers();
  }
}

DataLoader::~DataLoader() { StopWorkers(); }

DataLoader::Planned DataLoader::Plan(int64_t* epoch, int64_t* offset, std::vector<int64_t>* indices) const {
  if (*offset >= static_cast<int64_t>(indices->size())) {
    ++*epoch;
    *offset = 0;
    *indices = sampler_.Indices(*epoch);
  }
  const int64_t end = std::min<int64_t>(*offset + batch_size_, static_cast<int64_t>(indices->size()));
  Planned p{*epoch, end, std::vector<int64_t>(indices->begin() + *offset, indices->begin() + end)};
  *offset = end;
  return p;
}

void DataLoader::StartWorkers() {
  Prefetch& p = *prefetch_;
  p.stop = false;
  p.next_seq = p.consumed_seq = 0;
  p.ready.clear();
  p.epoch = epoch_;
  p.offset = offset_;
  p.indices = indices_;
  for (int i = 0; i < p.workers; ++i) p.threads.emplace_back([this] { WorkerLoop(); });
}

void DataLoader::StopWorkers() {
  if (!prefetch_) return;
  Prefetch& p = *prefetch_;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.stop = true;
  }
  p.cv.notify_all();
  for (std::thread& t : p.threads) t.join();
  p.threads.clear();
}

void DataLoader::WorkerLoop() {
  Prefetch& p = *prefetch_;
  std::unique_lock<std::mutex> lock(p.mu);
  while (true) {
    p.cv.wait(lock, [&] { return p.stop || static_cast<size_t>(p.next_seq - p.consumed_seq) < p.capacity; });
    if (p.stop) return;
    const int64_t seq = p.next_seq++;
    Planned planned = Plan(&p.epoch, &p.offset, &p.indices);
    lock.unlock();
    Prefetch::Result result{{}, planned.epoch, planned.end, nullptr};
    try {
      result.batch = dataset_->GetForEpoch(planned.indices, planned.epoch);
    } catch (...) {
      result.error = std::current_exception();
    }
    lock.lock();
    p.ready[seq] = std::move(result);
    p.cv.notify_all();
  }
}

void DataLoader::Seek(int64_t epoch, int64_t offset) {
  if (cursor_) {
    SetCursor(epoch * cursor_->sampler.dataset_size() + offset * cursor_->members);
    return;
  }
  StopWorkers();
  epoch_ = epoch;
  offset_ = offset;
  indices_ = sampler_.Indices(epoch_);
  if (prefetch_) StartWorkers();
}

Batch DataLoader::Next() {
  if (cursor_) return NextAtCursor();
  if (!prefetch_) {
    Planned planned = Plan(&epoch_, &offset_, &indices_);
    return dataset_->GetForEpoch(planned.indices, planned.epoch);
  }
  Prefetch& p = *prefetch_;
  std::unique_lock<std::mutex> lock(p.mu);
  p.cv.wait(lock, [&] { return p.ready.count(p.consumed_seq) > 0; });
  auto node = p.ready.extract(p.consumed_seq);
  ++p.consumed_seq;
  lock.unlock();
  p.cv.notify_all();
  Prefetch::Result& r = node.mapped();
  if (r.error) std::rethrow_exception(r.error);
  // The position as if this batch had been read here.
  if (r.epoch != epoch_) indices_ = sampler_.Indices(r.epoch);
  epoch_ = r.epoch;
  offset_ = r.end;
  return std::move(r.batch);
}

void DataLoader::UseGlobalCursor(int64_t limit) {
  StopWorkers();
  prefetch_.reset();
  cursor_ =
      std::make_unique<Cursor>(Cursor{GlobalCursorSampler(dataset_->size(), sampler_.shuffle(), sampler_.seed())});
  cursor_->limit = limit;
  SetCursor(0);
}

void DataLoader::SetMembers(int32_t member, int32_t members) {
  cursor_->member = member;
  cursor_->members = members;
  RollbackReads();
}

int64_t DataLoader::cursor() const { return cursor_->committed; }

void DataLoader::SetCursor(int64_t cursor) {
  cursor_->committed = cursor_->read = cursor;
  const int64_t n = cursor_->sampler.dataset_size();
  epoch_ = cursor / n;
  offset_ = (cursor % n) / cursor_->members;
  cursor_->reading.clear();
}

void DataLoader::CommitReads() {
  std::vector<int64_t> read = std::move(cursor_->reading);
  SetCursor(cursor_->read);
  cursor_->committed_positions = std::move(read);
}

void DataLoader::RollbackReads() {
  cursor_->read = cursor_->committed;
  cursor_->reading.clear();
}

const std::vector<int64_t>& DataLoader::committed_positions() const { return cursor_->committed_positions; }

Batch DataLoader::NextAtCursor() {
  Cursor& c = *cursor_;
  std::vector<int64_t> positions = GlobalCursorSampler::Positions(c.read, c.member, c.members, batch_size_);
  while (!positions.empty() && positions.back() >= c.limit) positions.pop_back();
  c.read = std::min(c.read + int64_t{c.members} * batch_size_, std::max(c.read, c.limit));
  c.reading.insert(c.reading.end(), positions.begin(), positions.end());
  // Samples of one epoch are read together (a batch may reach into the next).
  const int64_t n = c.sampler.dataset_size();
  std::vector<Batch> parts;
  size_t i = 0;
  while (i < positions.size()) {
    const int64_t epoch = positions[i] / n;
    std::vector<int64_t> indices;
    for (; i < positions.size() && positions[i] / n == epoch; ++i) indices.push_back(c.sampler.IndexAt(positions[i]));
    parts.push_back(dataset_->GetForEpoch(indices, epoch));
  }
  if (parts.size() == 1) return std::move(parts.front());
  if (parts.empty()) return dataset_->GetForEpoch({}, 0);  // nothing left for this member
  std::vector<at::Tensor> inputs, targets;
  for (const Batch& b : parts) {
    inputs.push_back(b.inputs);
    targets.push_back(b.targets);
  }
  return {at::cat(inputs), at::cat(targets)};
}

}  // namespace trainyard
