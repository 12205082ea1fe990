#include "worker/checkpoint.h"

#include "worker/device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <sstream>
#include <type_traits>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "worker/collectives.h"
#include "worker/data.h"
#include "worker/ddp.h"
#include "worker/fsdp.h"
#include "worker/models.h"
#include "worker/safetensors.h"

namespace trainyard {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "trainyard-checkpoint-1";
constexpr const char* kTrainerState = "trainer_state.json";
constexpr const char* kShardedIndex = "sharded_index.json";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kModelIndex = "model.safetensors.index.json";
constexpr const char* kModelFile = "model.safetensors";

std::string RankStateFile(int32_t rank) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "rank_state-%05d.safetensors", rank);
  return buf;
}

std::string ShardFile(const char* kind, int32_t writer, int32_t writers) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%s_shard-%05d-of-%05d.safetensors", kind, writer, writers);
  return buf;
}

// ---- Optimizer state -------------------------------------------------------

// The per-parameter state tensors the job's optimizer keeps.
std::vector<std::string> OptimizerFields(const JobSpec& spec) {
  switch (spec.optimizer.kind) {
    case OptimizerKind::kAdamW: return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::kSgd:
      return spec.optimizer.momentum > 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }
  return {};
}

// The optimizer's key for a parameter's state: its TensorImpl's address,
// held as a pointer (LibTorch 2.x) or as that pointer printed (older).
template <typename Optimizer = torch::optim::Optimizer>
auto StateKey(const at::Tensor& p) {
  using Key = typename std::decay_t<decltype(std::declval<Optimizer&>().state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

torch::optim::OptimizerParamState* StateOf(torch::optim::Optimizer& o, const at::Tensor& p) {
  return OptimizerStateOf(o, p);
}

at::Tensor FieldOf(torch::optim::Optimizer& o, const at::Tensor& p, const std::string& field) {
  auto* st = StateOf(o, p);
  if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(st)) {
    if (field == "exp_avg") return a->exp_avg();
    if (field == "exp_avg_sq") return a->exp_avg_sq();
  } else if (auto* g = dynamic_cast<torch::optim::SGDParamState*>(st)) {
    if (field == "momentum_buffer") return g->momentum_buffer();
  }
  return at::Tensor();
}

int64_t StepOf(torch::optim::Optimizer& o, const at::Tensor& p) {
  if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(StateOf(o, p))) return a->step();
  return 0;
}

bool HasState(torch::optim::Optimizer& o, const std::vector<at::Tensor>& holders) {
  for (const at::Tensor& h : holders) {
    if (StateOf(o, h) != nullptr) return true;
  }
  return false;
}

// Gives `p` zero state (kept when present) with the given step.
void EnsureState(torch::optim::Optimizer& o, OptimizerKind kind, const at::Tensor& p, int64_t step) {
  const auto key = StateKey(p);
  auto zeros = [&] { return at::zeros_like(p.detach(), at::MemoryFormat::Preserve); };
  if (kind == OptimizerKind::kAdamW) {
    auto* a = dynamic_cast<torch::optim::AdamWParamState*>(StateOf(o, p));
    if (a == nullptr) {
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->exp_avg(zeros());
      st->exp_avg_sq(zeros());
      a = st.get();
      o.state()[key] = std::move(st);
    }
    a->step(step);
  } else if (StateOf(o, p) == nullptr) {
    auto st = std::make_unique<torch::optim::SGDParamState>();
    st->momentum_buffer(zeros());
    o.state()[key] = std::move(st);
  }
}

// ---- Who holds what --------------------------------------------------------

// Elements [begin, end) of flattened parameter `param`, stored at
// `holder_offset` of optimizer parameter `holder`.
struct Piece {
  size_t param = 0;
  int64_t begin = 0, end = 0;
  size_t holder = 0;
  int64_t holder_offset = 0;
  int64_t size() const { return end - begin; }
};

// How the job's parameters are held: on this rank (to load into), by every
// SHARDED writer, and which ranks take part in assembling FULL tensors.
class Holding {
 public:
  explicit Holding(const TrainingState& s) : s_(s) {
    for (const auto& item : s.model->named_parameters()) {
      names_.push_back(item.key());
      params_.push_back(item.value());
    }
    if (s.fsdp != nullptr) {
      holders_ = s.fsdp->ShardParameters();
      writers_ = s.fsdp->shard_size();
      my_writer_ = s.fsdp->replica_rank() == 0 ? s.fsdp->shard_rank() : -1;
    } else {
      holders_ = params_;
      writers_ = s.world_size;
      my_writer_ = s.rank;
      int64_t total = 0;
      for (const at::Tensor& p : params_) {
        offsets_.push_back(total);
        total += p.numel();
      }
      total_ = total;
    }
  }

  size_t num_params() const { return params_.size(); }
  const std::string& name(size_t p) const { return names_[p]; }
  const at::Tensor& param(size_t p) const { return params_[p]; }
  const std::vector<at::Tensor>& holders() const { return holders_; }
  int32_t writers() const { return writers_; }
  int32_t my_writer() const { return my_writer_; }

  // What writer w saves in a SHARDED checkpoint.
  std::vector<Piece> Owned(int32_t w) const {
    std::vector<Piece> out;
    if (s_.fsdp != nullptr) {
      const auto& units = s_.fsdp->units();
      for (size_t u = 0; u < units.size(); ++u) {
        const FsdpUnitInfo& info = units[u];
        const int64_t lo = w * info.shard_numel, hi = lo + info.shard_numel;
        for (size_t i = 0; i < info.params.size(); ++i) {
          const int64_t a = info.offsets[i], b = a + params_[info.params[i]].numel();
          const int64_t x = std::max(lo, a), y = std::min(hi, b);
          if (x < y) out.push_back({info.params[i], x - a, y - a, u, x - lo});
        }
      }
      return out;
    }
    const int64_t chunk = (total_ + writers_ - 1) / std::max(writers_, 1);
    const int64_t lo = w * chunk, hi = std::min(total_, lo + chunk);
    for (size_t p = 0; p < params_.size(); ++p) {
      const int64_t a = offsets_[p], b = a + params_[p].numel();
      const int64_t x = std::max(lo, a), y = std::min(hi, b);
      if (x < y) out.push_back({p, x - a, y - a, p, x - a});
    }
    return out;
  }

  // What this rank holds (and loads into).
  std::vector<Piece> Local() const {
    if (s_.fsdp != nullptr) return Owned(s_.fsdp->shard_rank());
    std::vector<Piece> out;
    for (size_t p = 0; p < params_.size(); ++p) {
      if (params_[p].numel() > 0) out.push_back({p, 0, params_[p].numel(), p, 0});
    }
    return out;
  }

  // The group over which rank 0 assembles FULL tensors from their owners;
  // null when rank 0 holds every parameter whole.
  Collectives* full_group() const {
    return s_.fsdp != nullptr && s_.fsdp->shard_size() > 1 ? s_.fsdp->shard_group() : nullptr;
  }
  // Takes part in assembling FULL tensors.
  bool assembles() const { return s_.rank == 0 || (full_group() != nullptr && my_writer_ >= 0); }

 private:
  const TrainingState& s_;
  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> holders_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
  int32_t writers_ = 1;
  int32_t my_writer_ = 0;
};

// A piece's data on this rank: the parameter values (field < 0) or one
// optimizer field; zeros when the holder has no state for it.
at::Tensor PieceData(const TrainingState& s, const Holding& h, const Piece& piece, int field,
                     const std::vector<std::string>& fields) {
  const at::Tensor& holder = h.holders()[piece.holder];
  at::Tensor src = field < 0 ? holder.detach() : FieldOf(*s.optimizer, holder, fields[field]);
  if (!src.defined()) return at::zeros({piece.size()}, holder.options().requires_grad(false));
  return src.reshape({-1}).narrow(0, piece.holder_offset, piece.size()).contiguous();
}

// Rank 0 gets whole tensors, one at a time, from their owners' pieces.
class FullAssembler {
 public:
  FullAssembler(const TrainingState& s, const Holding& h, const std::vector<std::string>& fields)
      : s_(s), h_(h), fields_(fields), by_param_(h.num_params()) {
    if (h.full_group() == nullptr) {
      for (const Piece& piece : h.Local()) by_param_[piece.param].push_back({0, piece});
      return;
    }
    for (int32_t w = 0; w < h.writers(); ++w) {
      for (const Piece& piece : h.Owned(w)) by_param_[piece.param].push_back({w, piece});
    }
  }

  // Rank 0: parameter p's values (field < 0) or optimizer field, whole.
  // Other owners: send their pieces; returns an undefined tensor.
  at::Tensor Get(size_t p, int field) {
    Collectives* group = h_.full_group();
    const int tag = static_cast<int>((field + 1) * h_.num_params() + p);
    const at::Tensor& param = h_.param(p);
    if (s_.rank != 0) {
      for (const auto& [w, piece] : by_param_[p]) {
        if (w != h_.my_writer()) continue;
        // Host tensors: the pieces travel through the group's Gloo backend
        // whatever the device (and one tensor at a time through host memory).
        std::vector<at::Tensor> t = {ToHost(PieceData(s_, h_, piece, field, fields_))};
        group->process_group()->send(t, 0, tag)->wait();
      }
      return at::Tensor();
    }
    // DDP holds parameters whole in fp32: no copy. FSDP's module parameters
    // may be low-precision views; the fp32 shards are the truth.
    if (group == nullptr && field < 0 && s_.fsdp == nullptr) return ToHost(param.detach());
    at::Tensor out = at::empty(param.sizes(), at::TensorOptions(at::kFloat));  // host memory
    at::Tensor flat = out.view({-1});
    std::vector<c10::intrusive_ptr<c10d::Work>> pending;
    std::vector<std::vector<at::Tensor>> buffers;
    buffers.reserve(by_param_[p].size());
    for (const auto& [w, piece] : by_param_[p]) {
      at::Tensor dst = flat.narrow(0, piece.begin, piece.size());
      if (w == 0) {
        dst.copy_(PieceData(s_, h_, piece, field, fields_));
      } else {
        buffers.push_back({dst});
        pending.push_back(group->process_group()->recv(buffers.back(), w, tag));
      }
    }
    for (auto& work : pending) work->wait();
    return out;
  }

 private:
  const TrainingState& s_;
  const Holding& h_;
  const std::vector<std::string>& fields_;
  std::vector<std::vector<std::pair<int32_t, Piece>>> by_param_;
};

// ---- Agreement -------------------------------------------------------------

// The lowest rank whose `ok` is false, or -1. Collective.
int32_t FirstFailure(const TrainingState& s, bool ok) {
  if (!s.process_group) return ok ? -1 : s.rank;
  at::Tensor t = at::full({1}, ok ? int64_t{s.world_size} : int64_t{s.rank}, at::kLong);
  std::vector<at::Tensor> v = {t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MIN;
  s.process_group->allreduce(v, opts)->wait();
  const int64_t r = t.item<int64_t>();
  return r >= s.world_size ? -1 : static_cast<int32_t>(r);
}


nlohmann::ordered_json TensorTable(const std::vector<TensorSpec>& tensors) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const TensorSpec& t : tensors) {
    out.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", SafetensorsDtype(t.dtype)}});
  }
  return out;
}

// Parameters are kept (and saved) in fp32 whatever the compute dtype; their
// storage may be freed (FSDP), so only metadata is read.
std::vector<TensorSpec> ParamSpecs(const Holding& h) {
  std::vector<TensorSpec> out;
  for (size_t p = 0; p < h.num_params(); ++p) out.push_back({h.name(p), at::kFloat, h.param(p).sizes().vec()});
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Buffers(const TrainingState& s) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : s.model->named_buffers()) out.emplace_back(item.key(), item.value().detach());
  return out;
}

// ---- Writing ---------------------------------------------------------------

void WriteRankState(const TrainingState& s, const std::string& staging) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    tensors.emplace_back("rng.cpu", gen.get_state());
  }
  if (s.ddp != nullptr) {
    for (const auto& [k, v] : s.ddp->CommHookState()) tensors.emplace_back("comm_hook." + k, v.detach().cpu().contiguous());
  }
  for (const auto& [name, obj] : s.extra) {
    for (const auto& [k, v] : obj->State()) tensors.emplace_back("extra." + name + "." + k, v.detach().cpu().contiguous());
  }
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  std::map<std::string, std::string> meta = {{"rank", std::to_string(s.rank)},
                                             {"world_size", std::to_string(s.world_size)},
                                             {"step", std::to_string(s.step)},
                                             {"epoch", std::to_string(s.loader->epoch())},
                                             {"offset", std::to_string(s.loader->offset())}};
  WriteSafetensors((fs::path(staging) / RankStateFile(s.rank)).string(), specs,
                   [&](size_t i) { return tensors[i].second; }, meta);
}

void WriteTrainerState(const TrainingState& s, const Holding& h, CheckpointType type, int64_t index,
                       const std::vector<std::string>& fields, bool has_optimizer_state, const std::string& staging) {
  std::vector<TensorSpec> buffers;
  for (const auto& [name, t] : Buffers(s)) buffers.push_back({name, t.scalar_type(), t.sizes().vec()});
  int64_t optimizer_step = 0;
  for (const at::Tensor& holder : h.holders()) optimizer_step = std::max(optimizer_step, StepOf(*s.optimizer, holder));
  nlohmann::ordered_json j = {
      {"format", kFormat},
      {"type", CheckpointTypeName(type)},
      {"step", s.step},
      {"checkpoint_index", index},
      {"world_size", s.world_size},
      {"distributed_type", DistributedTypeName(s.spec->distributed_type)},
      {"sharding_strategy", s.fsdp != nullptr ? ShardingStrategyName(s.spec->fsdp.sharding_strategy) : ""},
      {"optimizer", OptimizerKindName(s.spec->optimizer.kind)},
      {"optimizer_step", optimizer_step},
      {"optimizer_fields", has_optimizer_state ? fields : std::vector<std::string>{}},
      {"data",
       {{"epoch", s.loader->epoch()},
        {"offset", s.loader->offset()},
        {"world_size", s.world_size},
        {"batch_size", s.spec->data.batch_size}}},
      {"parameters", TensorTable(ParamSpecs(h))},
      {"buffers", TensorTable(buffers)},
      {"spec", nlohmann::ordered_json::parse(JobSpecToJson(*s.spec))}};
  const std::string path = (fs::path(staging) / kTrainerState).string();
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2) << "\n";
  out.flush();
  if (!out) throw std::runtime_error("cannot write " + path);
}

void WriteFull(const TrainingState& s, const Holding& h, const std::vector<std::string>& fields,
               const std::string& staging) {
  if (!h.assembles()) return;
  FullAssembler assembler(s, h, fields);
  const size_t n = h.num_params();
  if (s.rank != 0) {
    for (size_t p = 0; p < n; ++p) assembler.Get(p, -1);
    for (size_t p = 0; p < n; ++p) {
      for (size_t f = 0; f < fields.size(); ++f) assembler.Get(p, static_cast<int>(f));
    }
    return;
  }
  // Rank 0 writes; on a write error it keeps receiving what the owners send
  // (so nobody waits forever), then reports the error.
  const auto buffers = Buffers(s);
  std::vector<TensorSpec> model_specs;
  for (size_t p = 0; p < n; ++p) model_specs.push_back({h.name(p), at::kFloat, h.param(p).sizes().vec()});
  for (const auto& [name, t] : buffers) model_specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  std::vector<TensorSpec> optim_specs;
  for (size_t p = 0; p < n; ++p) {
    for (const std::string& f : fields) optim_specs.push_back({h.name(p) + "." + f, at::kFloat, h.param(p).sizes().vec()});
  }
  size_t next_model = 0, next_optim = 0;
  std::string error;
  try {
    WriteShardedSafetensors(
        staging, model_specs,
        [&](size_t i) {
          next_model = i + 1;
          return i < n ? assembler.Get(i, -1).to(at::kFloat) : buffers[i - n].second.contiguous();
        },
        ParseSize(s.spec->checkpoint.max_shard_size));
    if (!fields.empty()) {
      WriteSafetensors((fs::path(staging) / kOptimizerFile).string(), optim_specs, [&](size_t i) {
        next_optim = i + 1;
        return assembler.Get(i / fields.size(), static_cast<int>(i % fields.size()));
      });
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (error.empty()) return;
  for (size_t i = next_model; i < n; ++i) assembler.Get(i, -1);
  for (size_t i = next_optim; i < optim_specs.size(); ++i) {
    assembler.Get(i / fields.size(), static_cast<int>(i % fields.size()));
  }
  throw std::runtime_error(error);
}

void WriteSharded(const TrainingState& s, const Holding& h, const std::vector<std::string>& fields,
                  const std::string& staging) {
  const int32_t w = h.my_writer();
  if (w >= 0) {
    const std::vector<Piece> pieces = h.Owned(w);
    const auto buffers = w == 0 ? Buffers(s) : std::vector<std::pair<std::string, at::Tensor>>{};
    std::vector<TensorSpec> specs;
    for (const Piece& piece : pieces) specs.push_back({h.name(piece.param), at::kFloat, {piece.size()}});
    for (const auto& [name, t] : buffers) specs.push_back({name, t.scalar_type(), {t.numel()}});
    WriteSafetensors((fs::path(staging) / ShardFile("model", w, h.writers())).string(), specs, [&](size_t i) {
      return i < pieces.size() ? PieceData(s, h, pieces[i], -1, fields).to(at::kFloat)
                               : buffers[i - pieces.size()].second.reshape({-1}).contiguous();
    });
    if (!fields.empty()) {
      std::vector<TensorSpec> ospecs;
      for (const Piece& piece : pieces) {
        for (const std::string& f : fields) ospecs.push_back({h.name(piece.param) + "." + f, at::kFloat, {piece.size()}});
      }
      WriteSafetensors((fs::path(staging) / ShardFile("optimizer", w, h.writers())).string(), ospecs, [&](size_t i) {
        return PieceData(s, h, pieces[i / fields.size()], static_cast<int>(i % fields.size()), fields);
      });
    }
  }
  if (s.rank != 0) return;
  // The index: every tensor's global shape and dtype, and its slices.
  nlohmann::ordered_json model = nlohmann::ordered_json::object();
  nlohmann::ordered_json optim = nlohmann::ordered_json::object();
  int64_t total = 0;
  for (size_t p = 0; p < h.num_params(); ++p) {
    const auto shape = h.param(p).sizes().vec();
    model[h.name(p)] = {{"dtype", "F32"}, {"shape", shape}, {"slices", nlohmann::ordered_json::array()}};
    total += h.param(p).numel() * 4;
    for (const std::string& f : fields) {
      optim[h.name(p) + "." + f] = {{"dtype", "F32"}, {"shape", shape}, {"slices", nlohmann::ordered_json::array()}};
    }
  }
  for (const auto& [name, t] : Buffers(s)) {
    model[name] = {{"dtype", SafetensorsDtype(t.scalar_type())},
                   {"shape", t.sizes().vec()},
                   {"slices", {{{"file", ShardFile("model", 0, h.writers())}, {"key", name}, {"begin", 0}, {"end", t.numel()}}}}};
    total += t.numel() * static_cast<int64_t>(t.element_size());
  }
  for (int32_t writer = 0; writer < h.writers(); ++writer) {
    for (const Piece& piece : h.Owned(writer)) {
      const std::string& name = h.name(piece.param);
      model[name]["slices"].push_back(
          {{"file", ShardFile("model", writer, h.writers())}, {"key", name}, {"begin", piece.begin}, {"end", piece.end}});
      for (const std::string& f : fields) {
        optim[name + "." + f]["slices"].push_back({{"file", ShardFile("optimizer", writer, h.writers())},
                                                   {"key", name + "." + f},
                                                   {"begin", piece.begin},
                                                   {"end", piece.end}});
      }
    }
  }
  nlohmann::ordered_json index = {{"format", "trainyard-sharded-1"},
                                  {"metadata", {{"total_size", total}, {"writers", h.writers()}}},
                                  {"model", model},
                                  {"optimizer", optim}};
  const std::string path = (fs::path(staging) / kShardedIndex).string();
  std::ofstream out(path, std::ios::trunc);
  out << index.dump(1) << "\n";
  out.flush();
  if (!out) throw std::runtime_error("cannot write " + path);
}

int64_t DirectoryBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

}  // namespace

CheckpointEvent SaveCheckpoint(const TrainingState& s, CheckpointType type, const CheckpointTarget& target) {
  const auto start = std::chrono::steady_clock::now();
  if (type == CheckpointType::kAuto) type = CheckpointType::kFull;
  CheckpointEvent ev;
  ev.index = target.index;
  ev.step = s.step;
  ev.type = type == CheckpointType::kSharded ? CheckpointType::kSharded : CheckpointType::kFull;
  CheckpointDir dir(target.project_dir);
  const std::string staging = dir.StagingPath(target.index, target.staging_tag);
  std::string error;
  auto fail = [&](int32_t failed_rank) {
    ev.ok = false;
    ev.error = failed_rank == s.rank ? error : "checkpoint failed on rank " + std::to_string(failed_rank);
    if (s.rank == 0) {
      std::error_code ec;
      fs::remove_all(staging, ec);
    }
    ev.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return ev;
  };

  if (s.rank == 0) {
    auto begun = dir.Begin(target.index, target.staging_tag);
    if (!begun.ok()) error = std::string(begun.status().message());
  }
  if (int32_t failed = FirstFailure(s, error.empty()); failed >= 0) return fail(failed);

  try {
    torch::NoGradGuard no_grad;
    const Holding h(s);
    const std::vector<std::string> all_fields = OptimizerFields(*s.spec);
    const bool has_state = HasState(*s.optimizer, h.holders());
    const std::vector<std::string> fields = has_state ? all_fields : std::vector<std::string>{};
    WriteRankState(s, staging);
    if (type == CheckpointType::kFull) {
      WriteFull(s, h, fields, staging);
    } else {
      WriteSharded(s, h, fields, staging);
    }
    if (s.rank == 0) WriteTrainerState(s, h, type, target.index, fields, has_state, staging);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (int32_t failed = FirstFailure(s, error.empty()); failed >= 0) return fail(failed);

  if (s.rank == 0) {
    nlohmann::ordered_json meta = {{"step", s.step}, {"type", CheckpointTypeName(ev.type)}, {"world_size", s.world_size}};
    if (auto st = dir.Commit(staging, target.index, meta.dump()); !st.ok()) error = std::string(st.message());
  }
  if (int32_t failed = FirstFailure(s, error.empty()); failed >= 0) return fail(failed);

  ev.ok = true;
  ev.path = (fs::absolute(dir.root()) / ("checkpoint_" + std::to_string(target.index))).string();
  if (s.rank == 0) {
    ev.bytes = DirectoryBytes(ev.path);
    if (s.spec->checkpoint.total_limit > 0) {
      // Rotation trouble does not undo the checkpoint just committed.
      auto deleted = dir.ApplyTotalLimit(s.spec->checkpoint.total_limit);
      if (!deleted.ok()) ev.error = "total_limit: " + std::string(deleted.status().message());
    }
  }
  ev.unix_millis = NowMillis();
  ev.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ev;
}

std::string ResolveCheckpoint(const std::string& project_dir, const std::string& resume_from,
                              std::vector<std::string>* notes) {
  if (resume_from.empty()) return "";
  if (resume_from != "latest") {
    auto info = CheckCheckpoint(resume_from, /*verify=*/true);
    if (!info.ok()) throw std::runtime_error("checkpoint.resume_from: " + std::string(info.status().message()));
    return info->path;
  }
  CheckpointDir dir(project_dir);
  CheckpointScan scan = dir.List(/*verify=*/false);
  for (const auto& [path, why] : scan.skipped) notes->push_back("skipped " + path + ": " + why);
  for (const CheckpointInfo& c : scan.complete) {
    auto info = CheckCheckpoint(c.path, /*verify=*/true);
    if (info.ok()) return info->path;
    notes->push_back("skipped " + c.path + ": " + std::string(info.status().message()));
  }
  return "";
}

// ---- Reading ---------------------------------------------------------------

struct CheckpointReader::Impl {
  struct Slice {
    std::string file, key;
    int64_t begin = 0, end = 0;
  };
  struct Entry {
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    std::vector<Slice> slices;
  };
  std::string dir;
  nlohmann::json state;
  std::map<std::string, Entry> model, optim;
  mutable std::map<std::string, SafetensorsHeader> headers;

  const SafetensorsHeader& Header(const std::string& file) const {
    auto it = headers.find(file);
    if (it == headers.end()) it = headers.emplace(file, ReadSafetensorsHeader((fs::path(dir) / file).string())).first;
    return it->second;
  }

  static int64_t Numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }

  // Every tensor of a safetensors file as a whole-tensor entry.
  void AddWholeFile(const std::string& file, std::map<std::string, Entry>* into) {
    for (const SafetensorsEntry& e : Header(file).tensors) {
      Entry entry{e.spec.dtype, e.spec.shape, Numel(e.spec.shape), {}};
      entry.slices.push_back({file, e.spec.name, 0, entry.numel});
      (*into)[e.spec.name] = entry;
    }
  }

  void AddIndexed(const nlohmann::json& table, std::map<std::string, Entry>* into) {
    for (auto& [name, info] : table.items()) {
      Entry entry;
      entry.dtype = FromSafetensorsDtype(info.at("dtype").get<std::string>());
      entry.shape = info.at("shape").get<std::vector<int64_t>>();
      entry.numel = Numel(entry.shape);
      for (const auto& sl : info.at("slices")) {
        entry.slices.push_back({sl.at("file").get<std::string>(), sl.at("key").get<std::string>(),
                                sl.at("begin").get<int64_t>(), sl.at("end").get<int64_t>()});
      }
      (*into)[name] = entry;
    }
  }

  at::Tensor Range(const std::map<std::string, Entry>& table, const std::string& name, int64_t begin,
                   int64_t end) const {
    auto it = table.find(name);
    if (it == table.end()) throw std::runtime_error(dir + ": checkpoint has no tensor '" + name + "'");
    const Entry& e = it->second;
    at::Tensor out = at::empty({end - begin}, at::TensorOptions(e.dtype));
    int64_t covered = 0;
    for (const Slice& sl : e.slices) {
      const int64_t x = std::max(begin, sl.begin), y = std::min(end, sl.end);
      if (x >= y) continue;
      const std::string path = (fs::path(dir) / sl.file).string();
      out.narrow(0, x - begin, y - x).copy_(ReadSafetensorRange(path, Header(sl.file), sl.key, x - sl.begin, y - sl.begin));
      covered += y - x;
    }
    if (covered != end - begin) {
      throw std::runtime_error(dir + ": checkpoint lacks elements [" + std::to_string(begin) + ", " +
                               std::to_string(end) + ") of '" + name + "'");
    }
    return out;
  }
};

CheckpointReader::CheckpointReader(const std::string& dir) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.dir = dir;
  std::ifstream in(fs::path(dir) / kTrainerState);
  if (!in) throw std::runtime_error(dir + ": no " + std::string(kTrainerState));
  s.state = nlohmann::json::parse(in, nullptr, false);
  if (s.state.is_discarded() || s.state.value("format", "") != kFormat) {
    throw std::runtime_error(dir + ": " + kTrainerState + " is not a " + kFormat + " file");
  }
  try {
    if (s.state.value("type", "") == "sharded") {
      std::ifstream idx(fs::path(dir) / kShardedIndex);
      auto index = nlohmann::json::parse(idx, nullptr, false);
      if (index.is_discarded()) throw std::runtime_error(dir + ": " + kShardedIndex + " is not valid JSON");
      s.AddIndexed(index.at("model"), &s.model);
      s.AddIndexed(index.at("optimizer"), &s.optim);
    } else {
      if (fs::exists(fs::path(dir) / kModelIndex)) {
        std::ifstream idx(fs::path(dir) / kModelIndex);
        auto index = nlohmann::json::parse(idx, nullptr, false);
        if (index.is_discarded()) throw std::runtime_error(dir + ": " + kModelIndex + " is not valid JSON");
        std::set<std::string> files;
        for (auto& [name, file] : index.at("weight_map").items()) files.insert(file.get<std::string>());
        for (const std::string& f : files) s.AddWholeFile(f, &s.model);
      } else {
        s.AddWholeFile(kModelFile, &s.model);
      }
      if (fs::exists(fs::path(dir) / kOptimizerFile)) s.AddWholeFile(kOptimizerFile, &s.optim);
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(dir + ": malformed index: " + e.what());
  }
}

CheckpointReader::~CheckpointReader() = default;

std::string CheckpointReader::type() const { return impl_->state.value("type", ""); }

std::vector<std::string> CheckpointReader::ModelTensors() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : impl_->model) out.push_back(name);
  return out;
}
std::vector<std::string> CheckpointReader::OptimizerTensors() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : impl_->optim) out.push_back(name);
  return out;
}
at::Tensor CheckpointReader::ModelTensor(const std::string& name) const {
  auto it = impl_->model.find(name);
  if (it == impl_->model.end()) throw std::runtime_error("checkpoint has no model tensor '" + name + "'");
  return impl_->Range(impl_->model, name, 0, it->second.numel).view(it->second.shape);
}
at::Tensor CheckpointReader::OptimizerTensor(const std::string& name) const {
  auto it = impl_->optim.find(name);
  if (it == impl_->optim.end()) throw std::runtime_error("checkpoint has no optimizer tensor '" + name + "'");
  return impl_->Range(impl_->optim, name, 0, it->second.numel).view(it->second.shape);
}

ResumeInfo LoadCheckpoint(const TrainingState& s, const std::string& dir) {
  CheckpointReader reader(dir);
  const CheckpointReader::Impl& r = *reader.impl_;
  const nlohmann::json& ts = r.state;
  ResumeInfo info;
  torch::NoGradGuard no_grad;
  const Holding h(s);

  // Every parameter and buffer must be there with its shape and dtype.
  auto check = [&](const TensorSpec& t) {
    auto it = r.model.find(t.name);
    if (it == r.model.end()) throw std::runtime_error(dir + ": checkpoint has no tensor '" + t.name + "' the model needs");
    if (it->second.shape != t.shape || it->second.dtype != t.dtype) {
      throw std::runtime_error(dir + ": tensor '" + t.name + "' is " + SafetensorsDtype(it->second.dtype) +
                               c10::str(c10::IntArrayRef(it->second.shape)) + " in the checkpoint, " +
                               SafetensorsDtype(t.dtype) + c10::str(c10::IntArrayRef(t.shape)) + " in the model");
    }
  };
  for (const TensorSpec& t : ParamSpecs(h)) check(t);
  const auto buffers = Buffers(s);
  for (const auto& [name, t] : buffers) check({name, t.scalar_type(), t.sizes().vec()});
  if (r.model.size() != h.num_params() + buffers.size()) {
    throw std::runtime_error(dir + ": checkpoint has " + std::to_string(r.model.size()) + " model tensors, the model " +
                             std::to_string(h.num_params() + buffers.size()));
  }

  const std::vector<Piece> local = h.Local();
  for (const Piece& piece : local) {
    h.holders()[piece.holder].detach().view({-1}).narrow(0, piece.holder_offset, piece.size())
        .copy_(r.Range(r.model, h.name(piece.param), piece.begin, piece.end));
  }
  for (const auto& [name, t] : buffers) t.view({-1}).copy_(r.Range(r.model, name, 0, t.numel()));

  // Optimizer state.
  const std::vector<std::string> fields = ts.value("optimizer_fields", std::vector<std::string>{});
  const std::string kind = ts.value("optimizer", "");
  if (!fields.empty() && kind != OptimizerKindName(s.spec->optimizer.kind)) {
    info.notes.push_back("optimizer state not restored: the checkpoint has " + kind + ", the job uses " +
                         OptimizerKindName(s.spec->optimizer.kind));
  } else if (!fields.empty() && fields == OptimizerFields(*s.spec)) {
    const int64_t step = ts.value("optimizer_step", int64_t{0});
    for (const at::Tensor& holder : h.holders()) EnsureState(*s.optimizer, s.spec->optimizer.kind, holder, step);
    for (const Piece& piece : local) {
      const at::Tensor& holder = h.holders()[piece.holder];
      for (const std::string& f : fields) {
        FieldOf(*s.optimizer, holder, f).view({-1}).narrow(0, piece.holder_offset, piece.size())
            .copy_(r.Range(r.optim, h.name(piece.param) + "." + f, piece.begin, piece.end));
      }
    }
  } else if (!fields.empty()) {
    info.notes.push_back("optimizer state not restored: its fields differ from this job's optimizer settings");
  }

  // Per-rank state.
  const int32_t saved_world = ts.value("world_size", 0);
  const fs::path rank_file = fs::path(dir) / RankStateFile(s.rank);
  if (fs::exists(rank_file)) {
    const SafetensorsHeader header = ReadSafetensorsHeader(rank_file.string());
    std::map<std::string, at::Tensor> hook, rng;
    std::map<std::string, std::map<std::string, at::Tensor>> extra;
    for (const SafetensorsEntry& e : header.tensors) {
      const std::string& name = e.spec.name;
      at::Tensor t = ReadSafetensor(rank_file.string(), header, name);
      if (name == "rng.cpu") {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(t);
      } else if (name.rfind("comm_hook.", 0) == 0) {
        hook[name.substr(10)] = t;
      } else if (name.rfind("extra.", 0) == 0) {
        const std::string rest = name.substr(6);
        const size_t dot = rest.find('.');
        if (dot != std::string::npos) extra[rest.substr(0, dot)][rest.substr(dot + 1)] = t;
      }
    }
    if (!hook.empty() && s.ddp != nullptr) {
      if (saved_world == s.world_size) {
        s.ddp->LoadCommHookState(hook);
      } else {
        info.notes.push_back("comm hook state not restored: it was saved by " + std::to_string(saved_world) +
                             " ranks, the job has " + std::to_string(s.world_size));
      }
    }
    for (const auto& [name, obj] : s.extra) {
      auto it = extra.find(name);
      if (it != extra.end()) obj->LoadState(it->second);
    }
  } else {
    info.notes.push_back("no per-rank state for rank " + std::to_string(s.rank) + " (saved by " +
                         std::to_string(saved_world) + " ranks): RNG state not restored");
  }

  // Data position: the same global number of samples into the epoch.
  const auto& data = ts.at("data");
  int64_t offset = data.value("offset", int64_t{0});
  const int64_t data_world = data.value("world_size", int64_t{1});
  if (data_world != s.world_size) {
    offset = offset * data_world / s.world_size;
    info.notes.push_back("data position rescaled from " + std::to_string(data_world) + " to " +
                         std::to_string(s.world_size) + " ranks (same epoch, same number of samples into it)");
  }
  s.loader->Seek(data.value("epoch", int64_t{0}), offset);
  info.step = ts.value("step", int64_t{0});
  info.checkpoint_index = ts.value("checkpoint_index", int64_t{-1});
  return info;
}

torch::optim::OptimizerParamState* OptimizerStateOf(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto it = optimizer.state().find(StateKey(param));
  return it == optimizer.state().end() ? nullptr : it->second.get();
}

}  // namespace trainyard
