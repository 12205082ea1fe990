#include "worker/data.h"
#include "common/splitmix.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <torch/torch.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

namespace trainyard {

SyntheticDataset::SyntheticDataset(std::vector<int64_t> sample_shape, int64_t num_classes, int64_t num_samples,
                                   uint64_t seed)
    : sample_shape_(std::move(sample_shape)), num_samples_(num_samples), seed_(seed) {
  int64_t features = 1;
  for (int64_t d : sample_shape_) features *= d;
  at::Generator gen = at::detail::createCPUGenerator(SplitMix64(seed ^ 0x7ea7c4e5ULL));
  teacher_ = at::randn({num_classes, features}, gen, at::kFloat);
}

Batch SyntheticDataset::Get(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> shape = {static_cast<int64_t>(indices.size())};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  at::Tensor inputs = at::empty(shape, at::kFloat);
  at::Tensor flat = inputs.view({inputs.size(0), -1});
  for (size_t i = 0; i < indices.size(); ++i) {
    at::Generator gen =
        at::detail::createCPUGenerator(SplitMix64(seed_ + SplitMix64(static_cast<uint64_t>(indices[i]))));
    flat[static_cast<int64_t>(i)].normal_(0.0, 1.0, gen);
  }
  at::Tensor targets = at::matmul(flat, teacher_.t()).argmax(1);
  return {inputs, targets};
}

SyntheticTokens::SyntheticTokens(int64_t context, int64_t vocab, int64_t num_samples, uint64_t seed)
    : context_(context), vocab_(vocab), num_samples_(num_samples), seed_(seed) {
  const uint64_t r = SplitMix64(seed ^ 0x70c3ULL);
  a_ = static_cast<int64_t>(r % static_cast<uint64_t>(vocab - 1)) + 1;
  b_ = static_cast<int64_t>((r >> 32) % static_cast<uint64_t>(vocab));
}

Batch SyntheticTokens::Get(const std::vector<int64_t>& indices) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  at::Tensor seq = at::empty({n, context_ + 1}, at::kLong);
  auto acc = seq.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    at::Generator gen =
        at::detail::createCPUGenerator(SplitMix64(seed_ + SplitMix64(static_cast<uint64_t>(indices[i]))));
    at::Tensor noise = at::rand({context_ + 1}, gen);
    at::Tensor uniform = at::randint(vocab_, {context_ + 1}, gen, at::kLong);
    auto nz = noise.accessor<float, 1>();
    auto un = uniform.accessor<int64_t, 1>();
    acc[i][0] = un[0];
    for (int64_t t = 1; t <= context_; ++t) {
      acc[i][t] = nz[t] < 0.9f ? (a_ * acc[i][t - 1] + b_) % vocab_ : un[t];
    }
  }
  return {seq.narrow(1, 0, context_).contiguous(), seq.narrow(1, 1, context_).contiguous()};
}

OffsetDataset::OffsetDataset(std::shared_ptr<const Dataset> base, int64_t offset, int64_t size)
    : base_(std::move(base)), offset_(offset), size_(size) {}

Batch OffsetDataset::Get(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> shifted;
  shifted.reserve(indices.size());
  for (int64_t i : indices) shifted.push_back(offset_ + i);
  return base_->Get(shifted);
}

Batch OffsetDataset::GetForEpoch(const std::vector<int64_t>& indices, int64_t epoch) const {
  std::vector<int64_t> shifted(indices);
  for (int64_t& i : shifted) i += offset_;
  return base_->GetForEpoch(shifted, epoch);
}

namespace {

// The whole content of a file, gunzipped when it is gzip data.
std::string ReadMaybeGzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files unchanged
  if (f == nullptr) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) throw std::runtime_error("cannot read " + path + ": " + msg);
  return out;
}

uint32_t BigEndian32(const std::string& data, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(data[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(data[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(data[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(data[at + 3]));
}

// `dir`/`name` or `dir`/`name`.gz, whichever exists.
std::string IdxPath(const std::string& dir, const std::string& name) {
  for (const std::string& candidate : {dir + "/" + name, dir + "/" + name + ".gz"}) {
    if (::access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  throw std::runtime_error("MNIST: neither " + dir + "/" + name + " nor " + name + ".gz is readable");
}

}  // namespace

MnistDataset::MnistDataset(const std::string& dir, bool train, std::vector<int64_t> sample_shape) {
  const std::string split = train ? "train" : "t10k";
  const std::string ipath = IdxPath(dir, split + "-images-idx3-ubyte");
  const std::string lpath = IdxPath(dir, split + "-labels-idx1-ubyte");
  const std::string images = ReadMaybeGzip(ipath), labels = ReadMaybeGzip(lpath);
  if (images.size() < 16 || BigEndian32(images, 0) != 0x00000803) {
    throw std::runtime_error(ipath + ": not an IDX image file (magic 0x00000803)");
  }
  if (labels.size() < 8 || BigEndian32(labels, 0) != 0x00000801) {
    throw std::runtime_error(lpath + ": not an IDX label file (magic 0x00000801)");
  }
  const int64_t n = BigEndian32(images, 4), rows = BigEndian32(images, 8), cols = BigEndian32(images, 12);
  if (rows != 28 || cols != 28) {
    throw std::runtime_error(ipath + ": images are " + std::to_string(rows) + "x" + std::to_string(cols) +
                             ", not 28x28");
  }
  if (static_cast<int64_t>(images.size()) != 16 + n * 784) throw std::runtime_error(ipath + ": truncated");
  if (static_cast<int64_t>(BigEndian32(labels, 4)) != n || static_cast<int64_t>(labels.size()) != 8 + n) {
    throw std::runtime_error(lpath + ": has a different count or is truncated (" + std::to_string(n) + " images)");
  }
  int64_t per = 1;
  for (int64_t d : sample_shape) per *= d;
  if (per != 784) throw std::runtime_error("MNIST images have 784 pixels; the model takes " + std::to_string(per));
  at::Tensor raw = at::empty({n, 784}, at::kByte);
  std::memcpy(raw.data_ptr(), images.data() + 16, static_cast<size_t>(n * 784));
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  images_ = ((raw.to(at::kFloat) / 255.0 - 0.1307) / 0.3081).reshape(shape);
  labels_ = at::empty({n}, at::kByte);
  std::memcpy(labels_.data_ptr(), labels.data() + 8, static_cast<size_t>(n));
  labels_ = labels_.to(at::kLong);
  if (labels_.max().item<int64_t>() > 9) throw std::runtime_error(lpath + ": labels must be 0..9");
}

Batch MnistDataset::Get(const std::vector<int64_t>& indices) const {
  at::Tensor idx = at::tensor(indices, at::kLong);
  return {images_.index_select(0, idx), labels_.index_select(0, idx)};
}

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

DistributedSampler::DistributedSampler(int64_t dataset_size, int32_t rank, int32_t world_size, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      rank_(rank),
      world_size_(world_size),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (world_size < 1 || rank < 0 || rank >= world_size) throw std::invalid_argument("sampler: bad rank/world size");
  if (drop_last_ && dataset_size_ % world_size_ != 0) {
    num_samples_ = dataset_size_ / world_size_;
  } else {
    num_samples_ = (dataset_size_ + world_size_ - 1) / world_size_;
  }
  if (num_samples_ < 1) throw std::invalid_argument("sampler: the dataset is smaller than the world size");
}

std::vector<int64_t> DistributedSampler::Indices(int64_t epoch) const {
  std::vector<int64_t> all(static_cast<size_t>(dataset_size_));
  if (shuffle_) {
    at::Generator gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch));
    at::Tensor perm = at::randperm(dataset_size_, gen, at::kLong);
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + dataset_size_, all.begin());
  } else {
    std::iota(all.begin(), all.end(), 0);
  }
  const int64_t total = num_samples_ * world_size_;
  // Pad by wrapping around, as PyTorch does, or trim for drop_last.
  for (int64_t i = dataset_size_; i < total; ++i) all.push_back(all[static_cast<size_t>(i % dataset_size_)]);
  all.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

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
  StopWorkers();
  epoch_ = epoch;
  offset_ = offset;
  indices_ = sampler_.Indices(epoch_);
  if (prefetch_) StartWorkers();
}

Batch DataLoader::Next() {
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

}  // namespace trainyard
