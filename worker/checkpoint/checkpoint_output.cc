#include "worker/checkpoint/checkpoint_output.h"

#include <exception>

#include <ATen/ATen.h>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <utility>

#include "worker/base/device.h"

namespace trainyard {
namespace {

void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) throw std::runtime_error("cannot write " + path);
}

// A host tensor that shares no storage with anything the training thread
// may change: a tensor made for this checkpoint alone (an assembled FULL
// tensor, the RNG state) is kept; anything else is copied.
at::Tensor Detached(const at::Tensor& t) {
  if (!t.device().is_cpu()) return ToHost(t, /*pinned=*/true);
  if (t.is_contiguous() && t.storage_offset() == 0 && t.storage().use_count() == 1 &&
      t.storage().nbytes() == static_cast<size_t>(t.nbytes())) {
    return t;
  }
  return t.clone(at::MemoryFormat::Contiguous);
}

}  // namespace

void DiskOutput::Safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                             const std::function<at::Tensor(size_t)>& produce,
                             const std::map<std::string, std::string>& metadata) {
  WriteSafetensors(path, tensors, produce, metadata);
}

void DiskOutput::ShardedSafetensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                    const std::function<at::Tensor(size_t)>& produce, int64_t max_shard_bytes) {
  WriteShardedSafetensors(dir, tensors, produce, max_shard_bytes);
}

void DiskOutput::Text(const std::string& path, const std::string& text) { WriteTextFile(path, text); }

std::vector<at::Tensor> HostCopyOutput::Copy(const std::vector<TensorSpec>& tensors,
                                             const std::function<at::Tensor(size_t)>& produce) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.push_back(Detached(produce(i)));
    host_bytes_ += static_cast<int64_t>(out.back().nbytes());
  }
  return out;
}

void DiskOutput::Later(std::function<void(CheckpointOutput&)> work, int64_t /*host_bytes*/) { work(*this); }

void HostCopyOutput::Safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                                 const std::function<at::Tensor(size_t)>& produce,
                                 const std::map<std::string, std::string>& metadata) {
  auto copies = std::make_shared<std::vector<at::Tensor>>(Copy(tensors, produce));
  writes_.push_back([path, tensors, copies, metadata] {
    WriteSafetensors(
        path, tensors, [&](size_t i) { return (*copies)[i]; }, metadata);
  });
}

void HostCopyOutput::ShardedSafetensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                        const std::function<at::Tensor(size_t)>& produce, int64_t max_shard_bytes) {
  auto copies = std::make_shared<std::vector<at::Tensor>>(Copy(tensors, produce));
  writes_.push_back([dir, tensors, copies, max_shard_bytes] {
    WriteShardedSafetensors(
        dir, tensors, [&](size_t i) { return (*copies)[i]; }, max_shard_bytes);
  });
}

void HostCopyOutput::Text(const std::string& path, const std::string& text) {
  writes_.push_back([path, text] { WriteTextFile(path, text); });
}

void HostCopyOutput::Later(std::function<void(CheckpointOutput&)> work, int64_t host_bytes) {
  host_bytes_ += host_bytes;
  writes_.push_back([work = std::move(work)] {
    DiskOutput disk;
    work(disk);
  });
}

void HostCopyOutput::Flush() {
  std::vector<std::function<void()>> writes = std::move(writes_);
  writes_.clear();
  // Every write runs even after one failed: a deferred FULL assembly must
  // still send this rank's pieces, or rank 0 would wait for them.
  std::exception_ptr first;
  for (auto& write : writes) {
    try {
      write();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    write = nullptr;  // releases that file's copies as soon as it is written
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace trainyard
