// The safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header mapping each tensor name to {dtype, shape,
// data_offsets} (plus optional "__metadata__" of strings), then the raw
// little-endian bytes. Writers stream tensor by tensor — the header is
// computed from names, dtypes and shapes alone — so a model never has to be
// in memory at once. Not thread-safe per object.
#ifndef TRAINYARD_WORKER_BASE_SAFETENSORS_H_
#define TRAINYARD_WORKER_BASE_SAFETENSORS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace trainyard {

struct TensorSpec {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t nbytes() const;
};

// "F32", "BF16", ... (safetensors dtype names); throws for unsupported types.
std::string SafetensorsDtype(at::ScalarType type);
at::ScalarType FromSafetensorsDtype(const std::string& name);

// Writes one safetensors file. `produce(i)` returns tensor i's data when the
// writer reaches it (contiguous CPU tensor of the declared dtype and shape);
// the file is written in declaration order, fsynced and closed.
void WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                      const std::function<at::Tensor(size_t)>& produce,
                      const std::map<std::string, std::string>& metadata = {});

// A file's table of contents.
struct SafetensorsEntry {
  TensorSpec spec;
  int64_t begin = 0;  // byte offsets relative to the data section
  int64_t end = 0;
};
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;  // absolute file offset of the data section
};
SafetensorsHeader ReadSafetensorsHeader(const std::string& path);
// Elements [begin, end) of a tensor, flattened, as a 1-D tensor (only those
// bytes are read).
at::Tensor ReadSafetensorRange(const std::string& path, const SafetensorsHeader& header, const std::string& name,
                               int64_t begin, int64_t end);
// Reads one tensor (only its bytes are read).
at::Tensor ReadSafetensor(const std::string& path, const SafetensorsHeader& header, const std::string& name);

// The Hugging Face sharded layout in `dir`: model.safetensors when all
// tensors fit in `max_shard_bytes`, else model-0000k-of-0000n.safetensors
// plus model.safetensors.index.json ({"metadata": {"total_size": N},
// "weight_map": {name: file}}). Tensors are assigned to files in order; a
// tensor larger than the limit gets a file of its own. Returns file names.
std::vector<std::string> WriteShardedSafetensors(const std::string& dir, const std::vector<TensorSpec>& tensors,
                                                 const std::function<at::Tensor(size_t)>& produce,
                                                 int64_t max_shard_bytes);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_BASE_SAFETENSORS_H_
