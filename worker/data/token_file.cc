#include "worker/data/token_file.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "common/splitmix.h"

namespace trainyard {

TokenFile::TokenFile(const std::string& path, TokenDtype dtype, int64_t context, int64_t vocab, int64_t num_samples,
                     uint64_t seed, double begin_fraction, double end_fraction)
    : width_(dtype == TokenDtype::kUint32 ? 4 : 2),
      context_(context),
      vocab_(vocab),
      num_samples_(num_samples),
      seed_(seed) {
  std::error_code ec;
  std::vector<std::string> files;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      if (entry.path().extension() == ".bin") files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) throw std::runtime_error(path + ": a directory without .bin token shards");
  } else {
    files.push_back(path);
  }
  for (const std::string& file : files) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) throw std::runtime_error("cannot open " + file + ": " + std::strerror(errno));
    if (st.st_size % width_ != 0) {
      throw std::runtime_error(file + ": " + std::to_string(st.st_size) + " bytes is not a whole number of " +
                               TokenDtypeName(dtype) + " tokens (data.token_dtype)");
    }
    shards_.push_back({file, tokens_, st.st_size / width_});
    tokens_ += st.st_size / width_;
  }
  first_ = static_cast<int64_t>(begin_fraction * static_cast<double>(tokens_));
  last_ = static_cast<int64_t>(end_fraction * static_cast<double>(tokens_)) - (context + 1);
  if (last_ < first_) {
    throw std::runtime_error(path + ": " + std::to_string(tokens_) + " tokens are too few for windows of " +
                             std::to_string(context + 1) + " in this split");
  }
}

void TokenFile::Read(int64_t start, std::vector<int64_t>& out) const {
  // The first shard holding `start`, then on across shard ends.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), start,
                             [](int64_t pos, const Shard& s) { return pos < s.first; });
  size_t done = 0;
  std::vector<unsigned char> bytes;
  for (--it; done < out.size(); ++it) {
    const int64_t at = start + static_cast<int64_t>(done) - it->first;
    const size_t n = std::min(out.size() - done, static_cast<size_t>(it->tokens - at));
    bytes.resize(n * static_cast<size_t>(width_));
    const int fd = ::open(it->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + it->path + ": " + std::strerror(errno));
    const ssize_t got = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(at * width_));
    ::close(fd);
    if (got != static_cast<ssize_t>(bytes.size())) throw std::runtime_error(it->path + ": short read");
    for (size_t k = 0; k < n; ++k) {
      const unsigned char* b = bytes.data() + k * static_cast<size_t>(width_);
      // Little-endian, as numpy writes it.
      uint64_t v = 0;
      for (int64_t byte = width_ - 1; byte >= 0; --byte) v = (v << 8) | b[byte];
      const auto tok = static_cast<int64_t>(v);
      if (tok >= vocab_) {
        throw std::runtime_error(it->path + ": token " + std::to_string(tok) + " at position " +
                                 std::to_string(at + static_cast<int64_t>(k)) + " is not below the model's vocab " +
                                 std::to_string(vocab_));
      }
      out[done + k] = tok;
    }
    done += n;
  }
}

Batch TokenFile::Get(const std::vector<int64_t>& indices) const {
  const int64_t b = static_cast<int64_t>(indices.size());
  at::Tensor seq = at::empty({b, context_ + 1}, at::kLong);
  std::vector<int64_t> window(static_cast<size_t>(context_ + 1));
  auto acc = seq.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const uint64_t r = SplitMix64(seed_ + SplitMix64(static_cast<uint64_t>(indices[i]) ^ 0x70ce4ULL));
    const int64_t start = first_ + static_cast<int64_t>(r % static_cast<uint64_t>(last_ - first_ + 1));
    Read(start, window);
    for (int64_t t = 0; t <= context_; ++t) acc[i][t] = window[static_cast<size_t>(t)];
  }
  return {seq.narrow(1, 0, context_).contiguous(), seq.narrow(1, 1, context_).contiguous()};
}

}  // namespace trainyard
