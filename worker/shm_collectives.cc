#include "worker/shm_collectives.h"

#include <fcntl.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>
#include <random>
#include <stdexcept>
#include <thread>

namespace trainyard {
namespace {

constexpr size_t kCacheLine = 64;

// One counter per rank, each on its own cache line.
struct alignas(kCacheLine) RankCounter {
  std::atomic<uint64_t> epoch;
  char pad[kCacheLine - sizeof(std::atomic<uint64_t>)];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters must be lock-free");

// Each rank's words for AllreduceMax, on its own cache line.
struct alignas(kCacheLine) RankWords {
  int64_t v[ShmCollectives::kMaxWords];
};
static_assert(sizeof(RankWords) == kCacheLine, "one cache line per rank's words");

// Header: the counters, then two buffers of words (by call parity).
size_t HeaderBytes(int32_t world) {
  const size_t w = static_cast<size_t>(world);
  return (sizeof(RankCounter) * w + 2 * sizeof(RankWords) * w + 4095) / 4096 * 4096;
}

RankWords* WordsOf(void* base, int32_t world, uint64_t parity) {
  auto* first = reinterpret_cast<RankWords*>(static_cast<char*>(base) + sizeof(RankCounter) * world);
  return first + parity * static_cast<uint64_t>(world);
}

std::string HostIdentity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  // Separate network namespaces are separate hosts as far as the job is
  // concerned (containers, test "hosts"): their traffic must cross the link.
  std::error_code ec;
  const std::string net = std::filesystem::read_symlink("/proc/self/ns/net", ec).string();
  return std::string(host) + "/" + boot + "/" + net;
}

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string String(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

}  // namespace

bool ShmCollectives::AllRanksOnThisHost(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                        int32_t world_size, const std::string& key_prefix) {
  const std::string mine = HostIdentity();
  store->set(key_prefix + "/host/" + std::to_string(rank), Bytes(mine));
  bool same = true;
  for (int32_t r = 0; r < world_size; ++r) {
    same = same && String(store->get(key_prefix + "/host/" + std::to_string(r))) == mine;
  }
  return same;
}

std::unique_ptr<ShmCollectives> ShmCollectives::Create(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                       int32_t world_size, const std::string& key_prefix,
                                                       size_t chunk_bytes, std::chrono::milliseconds timeout) {
  const size_t chunk_floats = std::max<size_t>(chunk_bytes / sizeof(float) / world_size * world_size, world_size);
  // Layout: counters | world input slots | one result slot.
  const size_t bytes = HeaderBytes(world_size) + (static_cast<size_t>(world_size) + 1) * chunk_floats * sizeof(float);
  std::string name;
  int fd = -1;
  if (rank == 0) {
    std::random_device rd;
    name = "/trainyard-" + std::to_string(getpid()) + "-" + std::to_string(rd());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("shm_open(" + name + ") failed: " + strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      shm_unlink(name.c_str());
      throw std::runtime_error("cannot size shared memory segment " + name + ": " + strerror(errno));
    }
    store->set(key_prefix + "/shm/name", Bytes(name));
  } else {
    name = String(store->get(key_prefix + "/shm/name"));
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("shm_open(" + name + ") failed: " + strerror(errno));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    if (rank == 0) shm_unlink(name.c_str());
    throw std::runtime_error("mmap of " + name + " failed: " + strerror(errno));
  }
  // Everyone has mapped it once all have said so; then the name can go.
  store->add(key_prefix + "/shm/mapped", 1);
  if (rank == 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (store->add(key_prefix + "/shm/mapped", 0) < world_size) {
      if (std::chrono::steady_clock::now() > deadline) {
        munmap(base, bytes);
        shm_unlink(name.c_str());
        throw std::runtime_error("shared memory rendezvous timed out");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    shm_unlink(name.c_str());
  }
  return std::unique_ptr<ShmCollectives>(new ShmCollectives(rank, world_size, base, bytes, chunk_floats, timeout));
}

ShmCollectives::ShmCollectives(int32_t rank, int32_t world, void* base, size_t bytes, size_t chunk_floats,
                               std::chrono::milliseconds timeout)
    : rank_(rank), world_(world), base_(base), mapped_bytes_(bytes), chunk_floats_(chunk_floats), timeout_(timeout) {}

ShmCollectives::~ShmCollectives() { munmap(base_, mapped_bytes_); }

void ShmCollectives::Barrier() {
  auto* counters = static_cast<RankCounter*>(base_);
  const uint64_t target = ++epoch_;
  counters[rank_].epoch.store(target, std::memory_order_release);
  for (int32_t r = 0; r < world_; ++r) {
    if (counters[r].epoch.load(std::memory_order_acquire) >= target) continue;
    // Spin briefly (the peer is usually a core away), then yield, then nap:
    // with more ranks than cores spinning would steal the peer's CPU.
    auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0; counters[r].epoch.load(std::memory_order_acquire) < target; ++i) {
      if (i < 4000) {
        _mm_pause();
        continue;
      }
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > timeout_) {
        throw std::runtime_error("shared-memory allreduce: rank " + std::to_string(r) + " did not arrive within " +
                                 std::to_string(timeout_.count()) + " ms");
      }
      if (waited < std::chrono::milliseconds(2)) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
}

void ShmCollectives::Broadcast(void* data, size_t bytes, int32_t root) {
  if (root < 0 || root >= world_) throw std::invalid_argument("Broadcast: root out of range");
  // The root's input slot carries it: input slots are read only between an
  // operation's two barriers, so writing one before the first is safe.
  char* area = reinterpret_cast<char*>(base_) + HeaderBytes(world_) +
               static_cast<size_t>(root) * chunk_floats_ * sizeof(float);
  const size_t chunk = chunk_floats_ * sizeof(float);
  auto* p = static_cast<char*>(data);
  for (size_t begin = 0; begin < bytes || begin == 0; begin += chunk) {
    const size_t len = std::min(chunk, bytes - begin);
    if (rank_ == root) std::memcpy(area, p + begin, len);
    Barrier();  // the chunk is in place
    if (rank_ != root) std::memcpy(p + begin, area, len);
    Barrier();  // everyone has it: the slot is free again
    if (bytes == 0) break;
  }
}

void ShmCollectives::AllreduceMax(int64_t* values, int n) {
  if (n < 0 || n > kMaxWords) throw std::invalid_argument("AllreduceMax takes at most 8 values");
  // Call k writes buffer k % 2. A rank can write buffer p again (call k + 2)
  // only after the barrier of call k + 1, which every rank reaches after
  // reading call k's words: one barrier per call is enough.
  RankWords* words = WordsOf(base_, world_, word_calls_++ % 2);
  std::memcpy(words[rank_].v, values, sizeof(int64_t) * static_cast<size_t>(n));
  Barrier();
  for (int32_t r = 0; r < world_; ++r) {
    for (int i = 0; i < n; ++i) values[i] = std::max(values[i], words[r].v[i]);
  }
}

namespace {

// out[i] = (in[0][i] + in[1][i] + ... ) / divisor for i in [0, n), summed in
// rank order: the same bits on every rank. SSE2 (every x86-64): the loop is
// memory-bound, wider vectors would not make it faster.
void SumSlices(float* __restrict out, const float* const* in, int32_t count, size_t n, float divisor) {
  size_t i = 0;
  const __m128 d = _mm_set1_ps(divisor);
  for (; i + 4 <= n; i += 4) {
    __m128 acc = _mm_loadu_ps(in[0] + i);
    for (int32_t r = 1; r < count; ++r) acc = _mm_add_ps(acc, _mm_loadu_ps(in[r] + i));
    if (divisor != 1.0f) acc = _mm_div_ps(acc, d);
    _mm_storeu_ps(out + i, acc);
  }
  for (; i < n; ++i) {
    float acc = in[0][i];
    for (int32_t r = 1; r < count; ++r) acc += in[r][i];
    out[i] = divisor != 1.0f ? acc / divisor : acc;
  }
}

}  // namespace

void ShmCollectives::AllreduceSum(at::Tensor& tensor, float divisor) {
  if (tensor.scalar_type() != at::kFloat || !tensor.is_contiguous() || !tensor.device().is_cpu()) {
    throw std::invalid_argument("shared-memory allreduce takes contiguous fp32 CPU tensors");
  }
  float* data = tensor.data_ptr<float>();
  const size_t n = static_cast<size_t>(tensor.numel());
  auto* slots = reinterpret_cast<float*>(static_cast<char*>(base_) + HeaderBytes(world_));
  float* result = slots + static_cast<size_t>(world_) * chunk_floats_;
  std::vector<const float*> in(static_cast<size_t>(world_));
  for (size_t begin = 0; begin < n; begin += chunk_floats_) {
    const size_t len = std::min(chunk_floats_, n - begin);
    std::memcpy(slots + static_cast<size_t>(rank_) * chunk_floats_, data + begin, len * sizeof(float));
    Barrier();  // every input is in place
    // This rank reduces its slice of every input into its own tensor and
    // into the result slot, where the others take it from.
    const size_t per = (len + world_ - 1) / world_;
    const size_t lo = std::min(len, per * static_cast<size_t>(rank_));
    const size_t hi = std::min(len, lo + per);
    if (hi > lo) {
      for (int32_t r = 0; r < world_; ++r) in[r] = slots + static_cast<size_t>(r) * chunk_floats_ + lo;
      SumSlices(data + begin + lo, in.data(), world_, hi - lo, divisor);
      std::memcpy(result + lo, data + begin + lo, (hi - lo) * sizeof(float));
    }
    Barrier();  // every slice is reduced
    // The other ranks' slices.
    std::memcpy(data + begin, result, lo * sizeof(float));
    std::memcpy(data + begin + hi, result + hi, (len - hi) * sizeof(float));
    // The next chunk's first barrier keeps anyone from overwriting the
    // result before all have copied it out: writes to `result` happen only
    // after that barrier.
  }
}

}  // namespace trainyard
