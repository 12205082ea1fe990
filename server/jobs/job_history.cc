#include "server/jobs/job_history.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

// The store's form: "TYH1", then per series its name, its state and its
// points, integers as zigzag varints (each point's step, time and arrival
// number as the change from the point before it), values as 8 raw bytes.
constexpr char kMagic[] = "TYH1";

void PutVarint(std::string* out, int64_t v) {
  uint64_t z = (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  while (z >= 0x80) {
    out->push_back(static_cast<char>((z & 0x7f) | 0x80));
    z >>= 7;
  }
  out->push_back(static_cast<char>(z));
}

void PutDouble(std::string* out, double v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out->append(b, 8);
}

struct Reader {
  const std::string& in;
  size_t* pos;
  bool ok = true;

  int64_t Varint() {
    uint64_t z = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (*pos >= in.size()) break;
      const auto b = static_cast<uint8_t>(in[(*pos)++]);
      z |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
    }
    ok = false;
    return 0;
  }
  double Double() {
    if (in.size() - *pos < 8) {
      ok = false;
      return 0;
    }
    double v;
    std::memcpy(&v, in.data() + *pos, 8);
    *pos += 8;
    return v;
  }
  std::string Bytes(int64_t n) {
    if (n < 0 || static_cast<uint64_t>(n) > in.size() - *pos) {
      ok = false;
      return "";
    }
    std::string s = in.substr(*pos, n);
    *pos += n;
    return s;
  }
};

struct PointCodec {
  int64_t seq = 0, step = 0, millis = 0;
  void Put(std::string* out, int64_t s, const HistoryPoint& p) {
    PutVarint(out, s - seq);
    PutVarint(out, p.step - step);
    PutVarint(out, p.unix_millis - millis);
    PutDouble(out, p.value);
    seq = s, step = p.step, millis = p.unix_millis;
  }
  int64_t Get(Reader& r, HistoryPoint* p) {
    seq += r.Varint();
    step += r.Varint();
    millis += r.Varint();
    *p = {step, millis, r.Double()};
    return seq;
  }
};

}  // namespace

SeriesHistory::SeriesHistory(int max_points) : max_buckets_(std::max(1, (max_points - 2) / 2)) {}

void SeriesHistory::Add(const HistoryPoint& p) {
  const int64_t seq = added_++;
  last_ = p;
  if (seq == 0) {
    first_ = p;
    return;
  }
  int64_t idx = (seq - 1) / width_;
  while (idx >= max_buckets_) {
    Merge();
    idx = (seq - 1) / width_;
  }
  if (idx == static_cast<int64_t>(buckets_.size())) {
    buckets_.push_back({seq, seq, p, p});
    return;
  }
  Bucket& b = buckets_.back();
  if (p.value < b.lo.value) b.lo = p, b.lo_seq = seq;
  if (p.value > b.hi.value) b.hi = p, b.hi_seq = seq;
}

void SeriesHistory::Merge() {
  std::vector<Bucket> merged;
  merged.reserve((buckets_.size() + 1) / 2);
  for (size_t i = 0; i < buckets_.size(); i += 2) {
    Bucket b = buckets_[i];
    if (i + 1 < buckets_.size()) {
      const Bucket& c = buckets_[i + 1];
      if (c.lo.value < b.lo.value) b.lo = c.lo, b.lo_seq = c.lo_seq;
      if (c.hi.value > b.hi.value) b.hi = c.hi, b.hi_seq = c.hi_seq;
    }
    merged.push_back(b);
  }
  buckets_ = std::move(merged);
  width_ *= 2;
}

std::vector<HistoryPoint> SeriesHistory::points() const {
  std::vector<HistoryPoint> out;
  if (added_ == 0) return out;
  out.reserve(2 * buckets_.size() + 2);
  out.push_back(first_);
  const int64_t latest = added_ - 1;
  for (const Bucket& b : buckets_) {
    const bool lo_first = b.lo_seq <= b.hi_seq;
    const int64_t seqs[2] = {lo_first ? b.lo_seq : b.hi_seq, lo_first ? b.hi_seq : b.lo_seq};
    const HistoryPoint* pts[2] = {lo_first ? &b.lo : &b.hi, lo_first ? &b.hi : &b.lo};
    for (int k = 0; k < 2; ++k) {
      if (k == 1 && seqs[1] == seqs[0]) break;
      if (seqs[k] != latest) out.push_back(*pts[k]);
    }
  }
  if (latest > 0) out.push_back(last_);
  return out;
}

void SeriesHistory::EncodeTo(std::string* out) const {
  PutVarint(out, max_buckets_);
  PutVarint(out, width_);
  PutVarint(out, added_);
  if (added_ == 0) return;
  PointCodec c;
  c.Put(out, 0, first_);
  c.Put(out, added_ - 1, last_);
  PutVarint(out, static_cast<int64_t>(buckets_.size()));
  for (const Bucket& b : buckets_) {
    c.Put(out, b.lo_seq, b.lo);
    c.Put(out, b.hi_seq, b.hi);
  }
}

absl::StatusOr<SeriesHistory> SeriesHistory::DecodeFrom(const std::string& in, size_t* pos) {
  Reader r{in, pos};
  SeriesHistory s;
  s.max_buckets_ = static_cast<int>(r.Varint());
  s.width_ = r.Varint();
  s.added_ = r.Varint();
  if (!r.ok || s.max_buckets_ < 1 || s.max_buckets_ > (1 << 20) || s.width_ < 1 || s.added_ < 0) {
    return absl::InvalidArgumentError("a series' header is not valid");
  }
  if (s.added_ == 0) return s;
  PointCodec c;
  c.Get(r, &s.first_);
  c.Get(r, &s.last_);
  const int64_t n = r.Varint();
  if (!r.ok || n < 0 || n > s.max_buckets_) return absl::InvalidArgumentError("a series' bucket count is not valid");
  s.buckets_.resize(n);
  for (Bucket& b : s.buckets_) {
    b.lo_seq = c.Get(r, &b.lo);
    b.hi_seq = c.Get(r, &b.hi);
  }
  if (!r.ok) return absl::InvalidArgumentError("a series ends early");
  return s;
}

namespace {

// The series of a job's history, declared once: each one's name (on the
// wire, in trainctl history, the web UI's charts) and what it takes from an
// aggregated step (NaN: no point for this step).
struct SeriesDef {
  const char* name;
  double (*value)(const StepMetrics& m, int world_size);
};

constexpr SeriesDef kSeries[] = {
    {"loss", [](const StepMetrics& m, int) { return m.loss; }},
    {"eval_loss", [](const StepMetrics& m, int) { return m.eval_loss; }},
    {"samples_per_second", [](const StepMetrics& m, int) { return m.samples_per_second; }},
    {"step_seconds", [](const StepMetrics& m, int) { return m.step_seconds; }},
    {"learning_rate", [](const StepMetrics& m, int) { return m.learning_rate; }},
    {"grad_norm", [](const StepMetrics& m, int) { return m.grad_norm; }},
    // Device memory where the CUDA allocator counts it, else what the
    // rank's tensors hold.
    {"memory_bytes",
     [](const StepMetrics& m, int) {
       return m.device_allocated_bytes > 0 ? static_cast<double>(m.device_allocated_bytes)
                                           : static_cast<double>(m.param_bytes + m.grad_bytes + m.optimizer_bytes);
     }},
    {"mfu", [](const StepMetrics& m, int) { return ModelFlopsUtilization(m); }},
    {"world_size", [](const StepMetrics&, int world_size) { return static_cast<double>(world_size); }},
};

}  // namespace

const std::vector<std::string>& JobHistory::SeriesNames() {
  static const auto* names = [] {
    auto* out = new std::vector<std::string>;
    for (const SeriesDef& d : kSeries) out->push_back(d.name);
    return out;
  }();
  return *names;
}

void JobHistory::Add(const StepMetrics& m, int world_size) {
  for (const SeriesDef& d : kSeries) {
    const double v = d.value(m, world_size);
    if (!std::isfinite(v)) continue;
    const HistoryPoint p{m.step, m.unix_millis, v};
    series_[d.name].Add(p);
    tail_.emplace_back(d.name, p);
  }
  // A script's own numbers under their names; a name of the list above is
  // the list's, and past kMaxValueSeries of them a new name is not kept.
  const std::vector<std::string>& builtin = SeriesNames();
  for (const auto& [name, v] : m.values) {
    if (!std::isfinite(v) || name.empty() || name.size() > kMaxValueNameBytes) continue;
    if (std::find(builtin.begin(), builtin.end(), name) != builtin.end()) continue;
    auto it = series_.find(name);
    if (it == series_.end()) {
      const auto own = std::count_if(series_.begin(), series_.end(), [&](const auto& kv) {
        return std::find(builtin.begin(), builtin.end(), kv.first) == builtin.end();
      });
      if (static_cast<size_t>(own) >= kMaxValueSeries) continue;
      it = series_.emplace(name, SeriesHistory()).first;
    }
    const HistoryPoint p{m.step, m.unix_millis, v};
    it->second.Add(p);
    tail_.emplace_back(name, p);
  }
  dirty_ = true;
}

std::string JobHistory::Encode() const {
  std::string out(kMagic);
  PutVarint(&out, static_cast<int64_t>(series_.size()));
  for (const auto& [name, s] : series_) {
    PutVarint(&out, static_cast<int64_t>(name.size()));
    out += name;
    s.EncodeTo(&out);
  }
  return out;
}

// A tail: "TYT1", the number of points, then each point's series name,
// step and time (zigzag varints) and value (8 raw bytes).
constexpr char kTailMagic[] = "TYT1";

std::string JobHistory::TakeTail() {
  if (tail_.empty()) return "";
  std::string out(kTailMagic);
  PutVarint(&out, static_cast<int64_t>(tail_.size()));
  for (const auto& [name, p] : tail_) {
    PutVarint(&out, static_cast<int64_t>(name.size()));
    out += name;
    PutVarint(&out, p.step);
    PutVarint(&out, p.unix_millis);
    PutDouble(&out, p.value);
  }
  tail_.clear();
  return out;
}

absl::Status JobHistory::AddTail(const std::string& bytes) {
  if (bytes.compare(0, 4, kTailMagic) != 0) return absl::InvalidArgumentError("history tail: not one (magic)");
  size_t pos = 4;
  Reader r{bytes, &pos};
  const int64_t n = r.Varint();
  if (!r.ok || n < 0) return absl::InvalidArgumentError("history tail: point count is not valid");
  std::vector<std::pair<std::string, HistoryPoint>> points;
  for (int64_t i = 0; i < n; ++i) {
    std::string name = r.Bytes(r.Varint());
    HistoryPoint p;
    p.step = r.Varint();
    p.unix_millis = r.Varint();
    p.value = r.Double();
    if (!r.ok || name.empty())
      return absl::InvalidArgumentError(absl::StrCat("history tail: point ", i, " is not valid"));
    points.emplace_back(std::move(name), p);
  }
  if (pos != bytes.size()) return absl::InvalidArgumentError("history tail: bytes after the last point");
  for (auto& [name, p] : points) series_[name].Add(p);
  dirty_ = true;  // saved whole at the next save, which drops the tails
  return absl::OkStatus();
}

absl::StatusOr<JobHistory> JobHistory::Decode(const std::string& bytes) {
  if (bytes.compare(0, 4, kMagic) != 0) return absl::InvalidArgumentError("history: not a Trainyard history (magic)");
  size_t pos = 4;
  Reader r{bytes, &pos};
  const int64_t n = r.Varint();
  if (!r.ok || n < 0 || n > 64) return absl::InvalidArgumentError("history: series count is not valid");
  JobHistory h;
  for (int64_t i = 0; i < n; ++i) {
    const std::string name = r.Bytes(r.Varint());
    if (!r.ok || name.empty()) return absl::InvalidArgumentError("history: a series name is not valid");
    auto s = SeriesHistory::DecodeFrom(bytes, &pos);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("history: series ", name, ": ", s.status().message()));
    h.series_.emplace(name, *std::move(s));
  }
  if (pos != bytes.size()) return absl::InvalidArgumentError("history: bytes after the last series");
  return h;
}

}  // namespace trainyard
