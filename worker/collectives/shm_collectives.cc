#include "worker/collectives/shm_collectives.h"

#include <fcntl.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "worker/base/flight_recorder.h"

namespace trainyard {
namespace {

constexpr size_t kCacheLine = 64;

// One counter per rank, each on its own cache line, with the rank's process
// (pid and pid namespace) for the others to see whether it is still alive.
struct alignas(kCacheLine) RankCounter {
  std::atomic<uint64_t> epoch;
  std::atomic<int64_t> pid;     // 0: not known yet
  std::atomic<uint64_t> pidns;  // the inode of its pid namespace
  char pad[kCacheLine - 3 * sizeof(uint64_t)];
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

uint64_t PidNamespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// Whether process `pid` has ended: gone from /proc, or a zombie not yet
// reaped by its parent.
bool ProcessEnded(int64_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return true;
  std::string line;
  std::getline(f, line);
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

std::vector<uint8_t> Bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string String(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

}  // namespace

bool ShmCollectives::AllRanksOnThisHost(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank, int32_t world_size,
                                        const std::string& key_prefix) {
  const std::string mine = HostIdentity();
  store->set(key_prefix + "/host/" + std::to_string(rank), Bytes(mine));
  bool same = true;
  for (int32_t r = 0; r < world_size; ++r) {
    same = same && String(store->get(key_prefix + "/host/" + std::to_string(r))) == mine;
  }
  return same;
}

std::vector<int32_t> ShmCollectives::HostOfEachRank(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                    int32_t world_size, const std::string& key_prefix) {
  store->set(key_prefix + "/host/" + std::to_string(rank), Bytes(HostIdentity()));
  std::vector<std::string> hosts;
  std::vector<int32_t> out;
  for (int32_t r = 0; r < world_size; ++r) {
    const std::string h = String(store->get(key_prefix + "/host/" + std::to_string(r)));
    const auto it = std::find(hosts.begin(), hosts.end(), h);
    out.push_back(static_cast<int32_t>(it - hosts.begin()));
    if (it == hosts.end()) hosts.push_back(h);
  }
  return out;
}

namespace {

// Maps a segment of `bytes` on every rank (collective): rank 0 creates it
// and publishes its name under `key`; the name is unlinked once every rank
// has mapped it, so nothing outlives the processes. Failures throw, except
// with `reserve`: then rank 0 also allocates the pages up front (a tmpfs
// that is too small fails here, not with SIGBUS on first touch), every rank
// waits until all have tried, and if any failed every rank gets nullptr
// (and `*error` says why, on the ranks that know).
void* MapSegment(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key, int32_t rank, int32_t world_size,
                 size_t bytes, std::chrono::milliseconds timeout, const std::function<bool()>& abort, bool reserve,
                 std::string* error_out = nullptr) {
  std::string name, error;
  int fd = -1;
  if (rank == 0) {
    std::random_device rd;
    name = "/trainyard-" + std::to_string(getpid()) + "-" + std::to_string(rd());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      error = "shm_open(" + name + ") failed: " + strerror(errno);
    } else if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      error = "cannot size shared memory segment " + name + ": " + strerror(errno);
    } else if (reserve) {
      const int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (rc != 0) error = "cannot reserve " + std::to_string(bytes) + " bytes of shared memory: " + strerror(rc);
    }
    if (!error.empty()) {
      if (fd >= 0) close(fd);
      fd = -1;
      shm_unlink(name.c_str());
      if (!reserve) throw std::runtime_error(error);
      name.clear();
    }
    store->set(key + "/name", Bytes(name));  // empty: the others give up too
  } else {
    name = String(store->get(key + "/name"));
    if (name.empty()) {
      error = "rank 0 could not create the shared memory segment";
    } else if ((fd = shm_open(name.c_str(), O_RDWR, 0600)) < 0) {
      error = "shm_open(" + name + ") failed: " + strerror(errno);
      if (!reserve) throw std::runtime_error(error);
    }
  }
  void* base = nullptr;
  if (fd >= 0) {
    base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
      base = nullptr;
      error = "mmap of " + std::to_string(bytes) + " bytes of " + name + " failed: " + strerror(errno);
      if (!reserve) {
        if (rank == 0) shm_unlink(name.c_str());
        throw std::runtime_error(error);
      }
    }
  }
  // Every rank says it has tried; once all have, the name can go.
  if (!error.empty()) store->add(key + "/failed", 1);
  store->add(key + "/mapped", 1);
  if (rank == 0 || reserve) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (store->add(key + "/mapped", 0) < world_size) {
      const bool late = std::chrono::steady_clock::now() > deadline;
      if (late || (abort && abort())) {
        if (base != nullptr) munmap(base, bytes);
        if (rank == 0 && !name.empty()) shm_unlink(name.c_str());
        throw ShmAborted(late ? "shared memory rendezvous timed out" : "shared memory rendezvous abandoned");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (rank == 0 && !name.empty()) shm_unlink(name.c_str());
  if (reserve && store->add(key + "/failed", 0) > 0) {
    if (base != nullptr) munmap(base, bytes);
    if (error_out != nullptr) *error_out = error.empty() ? "another rank could not map the shared memory" : error;
    return nullptr;
  }
  return base;
}

}  // namespace

std::unique_ptr<ShmCollectives> ShmCollectives::Create(const c10::intrusive_ptr<c10d::Store>& store, int32_t rank,
                                                       int32_t world_size, const std::string& key_prefix,
                                                       size_t chunk_bytes, std::chrono::milliseconds timeout,
                                                       std::function<bool()> abort) {
  const size_t chunk_floats = std::max<size_t>(chunk_bytes / sizeof(float) / world_size * world_size, world_size);
  // Layout: counters | world input slots | one result slot.
  const size_t bytes = HeaderBytes(world_size) + (static_cast<size_t>(world_size) + 1) * chunk_floats * sizeof(float);
  void* base = MapSegment(store, key_prefix + "/shm", rank, world_size, bytes, timeout, abort, /*reserve=*/false);
  auto shm = std::unique_ptr<ShmCollectives>(new ShmCollectives(rank, world_size, base, bytes, chunk_floats, timeout));
  shm->abort_ = std::move(abort);
  shm->store_ = store;
  shm->key_prefix_ = key_prefix;
  return shm;
}

bool ShmCollectives::ReserveResident(size_t bytes_per_rank) {
  if (resident_ != nullptr && bytes_per_rank <= resident_stride_) return true;
  resident_map_.reset();  // storages made from it keep it mapped (ResidentDataPtr)
  resident_ = nullptr;
  resident_stride_ = 0;
  const size_t stride = (std::max<size_t>(bytes_per_rank, 1) + 4095) / 4096 * 4096;
  const size_t bytes = stride * static_cast<size_t>(world_);
  const std::string key = key_prefix_ + "/resident/" + std::to_string(resident_segments_++);
  resident_error_.clear();
  void* base = MapSegment(store_, key, rank_, world_, bytes, timeout_, abort_, /*reserve=*/true, &resident_error_);
  if (base == nullptr) return false;
  resident_map_ = std::shared_ptr<void>(base, [bytes](void* p) { munmap(p, bytes); });
  resident_ = static_cast<char*>(base);
  resident_stride_ = stride;
  return true;
}

void* ShmCollectives::resident(int32_t rank) const {
  return resident_ != nullptr ? resident_ + static_cast<size_t>(rank) * resident_stride_ : nullptr;
}

c10::DataPtr ShmCollectives::ResidentDataPtr(void* data) const {
  if (resident_ == nullptr) throw std::logic_error("ResidentDataPtr before ReserveResident");
  auto* keep = new std::shared_ptr<void>(resident_map_);
  return c10::DataPtr(
      data, keep, [](void* ctx) { delete static_cast<std::shared_ptr<void>*>(ctx); }, c10::Device(c10::kCPU));
}

ShmCollectives::ShmCollectives(int32_t rank, int32_t world, void* base, size_t bytes, size_t chunk_floats,
                               std::chrono::milliseconds timeout)
    : rank_(rank), world_(world), base_(base), mapped_bytes_(bytes), chunk_floats_(chunk_floats), timeout_(timeout) {
  auto* counters = static_cast<RankCounter*>(base_);
  pidns_ = PidNamespace();
  counters[rank_].pidns.store(pidns_, std::memory_order_relaxed);
  counters[rank_].pid.store(getpid(), std::memory_order_release);
}

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
    std::chrono::steady_clock::duration next_liveness_check = std::chrono::milliseconds(1);
    for (uint64_t i = 0; counters[r].epoch.load(std::memory_order_acquire) < target; ++i) {
      if (i < 4000) {
        _mm_pause();
        continue;
      }
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > timeout_) {
        throw ShmAborted("shared-memory allreduce: rank " + std::to_string(r) + " did not arrive within " +
                         std::to_string(timeout_.count()) + " ms");
      }
      // Every millisecond of waiting: has the peer's process ended?
      if (waited >= next_liveness_check) {
        next_liveness_check = waited + std::chrono::milliseconds(1);
        const int64_t pid = counters[r].pid.load(std::memory_order_acquire);
        if (pid > 0 && counters[r].pidns.load(std::memory_order_relaxed) == pidns_ && ProcessEnded(pid) &&
            counters[r].epoch.load(std::memory_order_acquire) < target) {
          throw ShmAborted("shared-memory allreduce: rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                           ") ended while the others waited for it");
        }
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
  RecordedCollective record(recorder_, "shm", "broadcast", static_cast<int64_t>(bytes));
  if (root < 0 || root >= world_) throw std::invalid_argument("Broadcast: root out of range");
  // The root's input slot carries it: input slots are read only between an
  // operation's two barriers, so writing one before the first is safe.
  char* area =
      reinterpret_cast<char*>(base_) + HeaderBytes(world_) + static_cast<size_t>(root) * chunk_floats_ * sizeof(float);
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
  RecordedCollective record(recorder_, "shm", "allreduce_max", static_cast<int64_t>(n * sizeof(int64_t)));
  MaxOfWords(values, n);
}

void ShmCollectives::MaxOfWords(int64_t* values, int n) {
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

// out[k][i] = (in[0][i] + in[1][i] + ...) / divisor for every k < outs and
// i in [0, n), summed in rank order: the same bits on every rank. One pass
// reads every input once and writes every output once; outputs may be the
// inputs (in place). SSE2 (every x86-64): the loop is memory-bound, wider
// vectors would not make it faster.
void SumSlices(float* const* out, int32_t outs, const float* const* in, int32_t count, size_t n, float divisor) {
  size_t i = 0;
  const __m128 d = _mm_set1_ps(divisor);
  for (; i + 4 <= n; i += 4) {
    __m128 acc = _mm_loadu_ps(in[0] + i);
    for (int32_t r = 1; r < count; ++r) acc = _mm_add_ps(acc, _mm_loadu_ps(in[r] + i));
    if (divisor != 1.0f) acc = _mm_div_ps(acc, d);
    for (int32_t k = 0; k < outs; ++k) _mm_storeu_ps(out[k] + i, acc);
  }
  for (; i < n; ++i) {
    float acc = in[0][i];
    for (int32_t r = 1; r < count; ++r) acc += in[r][i];
    if (divisor != 1.0f) acc /= divisor;
    for (int32_t k = 0; k < outs; ++k) out[k][i] = acc;
  }
}

}  // namespace

void ShmCollectives::AllreduceSum(at::Tensor& tensor, float divisor) {
  RecordedCollective record(recorder_, "shm", "allreduce", static_cast<int64_t>(tensor.nbytes()));
  if (tensor.scalar_type() != at::kFloat || !tensor.is_contiguous() || !tensor.device().is_cpu()) {
    throw std::invalid_argument("shared-memory allreduce takes contiguous fp32 CPU tensors");
  }
  float* data = tensor.data_ptr<float>();
  const size_t n = static_cast<size_t>(tensor.numel());
  if (resident_ != nullptr) {
    // Every rank must take the same path: the tensor's place in the resident
    // area (-1: elsewhere) and length are compared before anything moves.
    const char* mine = static_cast<const char*>(resident(rank_));
    const auto* p = reinterpret_cast<const char*>(data);
    const bool inside = n > 0 && p >= mine && p + n * sizeof(float) <= mine + resident_stride_;
    const int64_t offset = inside ? static_cast<int64_t>(p - mine) : -1;
    int64_t words[4] = {offset, -offset, static_cast<int64_t>(n), -static_cast<int64_t>(n)};
    MaxOfWords(words, 4);  // a barrier: every rank's tensor is complete
    if (words[0] != -words[1] || words[2] != -words[3]) {
      throw std::runtime_error("shared-memory allreduce: ranks passed different tensors (offset " +
                               std::to_string(offset) + ", " + std::to_string(n) + " floats on rank " +
                               std::to_string(rank_) + ")");
    }
    if (inside) {
      AllreduceResident(static_cast<size_t>(offset), n, divisor);
      return;
    }
  }
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
      float* out[2] = {data + begin + lo, result + lo};
      // Written to this rank's tensor and to the result slot in one pass.
      SumSlices(out, 2, in.data(), world_, hi - lo, divisor);
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

void ShmCollectives::AllreduceResident(size_t offset, size_t n, float divisor) {
  // Every rank's copy is in place (the caller's barrier). Each rank reduces
  // one slice, a whole number of cache lines, across all copies and writes
  // the result into all of them: one read and one write of the tensor per
  // rank, against five passes when the tensors are private.
  constexpr size_t kLineFloats = kCacheLine / sizeof(float);
  const size_t per = ((n + world_ - 1) / world_ + kLineFloats - 1) / kLineFloats * kLineFloats;
  const size_t lo = std::min(n, per * static_cast<size_t>(rank_));
  const size_t hi = std::min(n, lo + per);
  if (hi > lo) {
    std::vector<float*> copies(static_cast<size_t>(world_));
    for (int32_t r = 0; r < world_; ++r)
      copies[r] = reinterpret_cast<float*>(static_cast<char*>(resident(r)) + offset) + lo;
    SumSlices(copies.data(), world_, copies.data(), world_, hi - lo, divisor);
  }
  Barrier();  // every slice is reduced everywhere
}

}  // namespace trainyard
