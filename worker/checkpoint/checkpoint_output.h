// Where the checkpoint code's files go. A synchronous save streams each
// tensor to disk as it is produced (DiskOutput), so it never holds more than
// one tensor extra. An asynchronous save copies every tensor into host
// memory at the step boundary (HostCopyOutput; pinned memory for CUDA
// tensors) and writes the same files later from its own thread (Flush),
// while training goes on.
#ifndef TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_OUTPUT_H_
#define TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_OUTPUT_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "worker/base/safetensors.h"

namespace trainyard {

class CheckpointOutput {
 public:
  virtual ~CheckpointOutput() = default;
  // As WriteSafetensors / WriteShardedSafetensors (safetensors.h): `produce`
  // is called once per tensor, in order, before the call returns.
  virtual void Safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                           const std::function<at::Tensor(size_t)>& produce,
                           const std::map<std::string, std::string>& metadata = {}) = 0;
  virtual void ShardedSafetensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                  const std::function<at::Tensor(size_t)>& produce, int64_t max_shard_bytes) = 0;
  // A small text file (JSON).
  virtual void Text(const std::string& path, const std::string& text) = 0;
  // Work that writes files (through the output it is given), run now or, by
  // an output that writes later, in its turn among the other writes.
  // `host_bytes`: the host memory the work holds until then.
  virtual void Later(std::function<void(CheckpointOutput&)> work, int64_t host_bytes) = 0;
  // True when the files are written later, on another thread (Later's work
  // must then not touch the training state).
  virtual bool deferred() const = 0;
};

// Writes at once. Throws std::runtime_error on I/O errors.
class DiskOutput final : public CheckpointOutput {
 public:
  void Safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                   const std::function<at::Tensor(size_t)>& produce,
                   const std::map<std::string, std::string>& metadata) override;
  void ShardedSafetensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                          const std::function<at::Tensor(size_t)>& produce, int64_t max_shard_bytes) override;
  void Text(const std::string& path, const std::string& text) override;
  void Later(std::function<void(CheckpointOutput&)> work, int64_t host_bytes) override;
  bool deferred() const override { return false; }
};

// Keeps host copies of what it is given; nothing touches the disk before
// Flush. The copies share no storage with the training state, so training
// may go on while Flush runs on another thread.
class HostCopyOutput final : public CheckpointOutput {
 public:
  void Safetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                   const std::function<at::Tensor(size_t)>& produce,
                   const std::map<std::string, std::string>& metadata) override;
  void ShardedSafetensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                          const std::function<at::Tensor(size_t)>& produce, int64_t max_shard_bytes) override;
  void Text(const std::string& path, const std::string& text) override;
  void Later(std::function<void(CheckpointOutput&)> work, int64_t host_bytes) override;
  bool deferred() const override { return true; }

  // Writes every file, in the order given, then releases the copies. Goes
  // on after a failed write, then throws the first error
  // (std::runtime_error on I/O errors). Call once.
  void Flush();
  // Bytes of the host copies (the tensors' data).
  int64_t host_bytes() const { return host_bytes_; }

 private:
  std::vector<at::Tensor> Copy(const std::vector<TensorSpec>& tensors,
                               const std::function<at::Tensor(size_t)>& produce);

  std::vector<std::function<void()>> writes_;
  int64_t host_bytes_ = 0;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CHECKPOINT_CHECKPOINT_OUTPUT_H_
