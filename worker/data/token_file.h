// TokenFile: windows of a flat token-id file or directory of shards (data.kind tokens).
#ifndef TRAINYARD_WORKER_DATA_TOKEN_FILE_H_
#define TRAINYARD_WORKER_DATA_TOKEN_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/spec_enums.h"
#include "worker/data/data.h"

namespace trainyard {

// Flat little-endian token ids (nanoGPT's .bin convention), uint16 or
// uint32: one file, or a directory whose *.bin shards, in name order, read
// as one stream. Sample i is a window of context + 1 tokens starting at a
// position drawn from (seed, i) within [begin, end) of the stream (a window
// may span two shards): inputs are its first `context` tokens, targets the
// next ones. Only the window's bytes are read. A token id ≥ vocab fails the
// batch, naming the file and position.
class TokenFile final : public Dataset {
 public:
  // `begin_fraction`/`end_fraction` select the part of the stream windows
  // start in (the training split and a held-out tail).
  TokenFile(const std::string& path, TokenDtype dtype, int64_t context, int64_t vocab, int64_t num_samples,
            uint64_t seed, double begin_fraction = 0.0, double end_fraction = 1.0);
  int64_t size() const override { return num_samples_; }
  Batch Get(const std::vector<int64_t>& indices) const override;
  int64_t tokens() const { return tokens_; }

 private:
  struct Shard {
    std::string path;
    int64_t first = 0;  // position of its first token in the stream
    int64_t tokens = 0;
  };
  // Reads tokens [start, start + out.size()) of the stream.
  void Read(int64_t start, std::vector<int64_t>& out) const;

  std::vector<Shard> shards_;
  int64_t width_;  // bytes per token
  int64_t context_, vocab_, num_samples_;
  uint64_t seed_;
  int64_t tokens_ = 0;
  int64_t first_ = 0, last_ = 0;  // window starts drawn from [first_, last_]
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_DATA_TOKEN_FILE_H_
