#include "worker/checkpoint/checkpoint.h"
#include "worker/checkpoint/checkpoint_full_assembler.h"
#include "worker/checkpoint/checkpoint_holding.h"
#include "worker/checkpoint/checkpoint_internal.h"

#include "worker/base/device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <sstream>
#include <type_traits>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <tuple>

#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "common/llama_config.h"
#include "worker/base/safetensors.h"
#include "worker/checkpoint/checkpoint_output.h"
#include "worker/collectives/collectives.h"
#include "worker/data/data_loader.h"
#include "worker/models/models.h"
#include "worker/parallel/ddp.h"
#include "worker/parallel/fsdp.h"

namespace trainyard {
namespace fs = std::filesystem;
using namespace checkpoint_internal;  // NOLINT: this file is part of the checkpoint code
namespace {

// ---- Writing ---------------------------------------------------------------

void WriteRankState(const TrainingState& s, const std::string& staging, CheckpointOutput& out) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    tensors.emplace_back("rng.cpu", gen.get_state());
  }
  if (s.ddp != nullptr) {
    for (const auto& [k, v] : s.ddp->CommHookState())
      tensors.emplace_back("comm_hook." + k, v.detach().cpu().contiguous());
  }
  for (const auto& [name, obj] : s.extra) {
    for (const auto& [k, v] : obj->State())
      tensors.emplace_back("extra." + name + "." + k, v.detach().cpu().contiguous());
  }
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  std::map<std::string, std::string> meta = {{"rank", std::to_string(s.rank)},
                                             {"world_size", std::to_string(s.world_size)},
                                             {"step", std::to_string(s.step)},
                                             {"epoch", std::to_string(s.loader->epoch())},
                                             {"offset", std::to_string(s.loader->offset())}};
  out.Safetensors((fs::path(staging) / RankStateFile(s.rank)).string(), specs,
                  [&](size_t i) { return tensors[i].second; }, meta);
}

void WriteTrainerState(const TrainingState& s, const Holding& h, CheckpointType type, int64_t index,
                       const std::vector<std::string>& fields, bool has_optimizer_state, const std::string& staging,
                       CheckpointOutput& out) {
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
  out.Text((fs::path(staging) / kTrainerState).string(), j.dump(2) + "\n");
}

// What rank 0 writes of a FULL checkpoint: the model's tensors (parameters,
// then buffers) and the optimizer's (each parameter's fields in turn).
struct FullLayout {
  size_t params = 0, fields = 0;
  std::vector<TensorSpec> model, optim;
  std::vector<std::pair<std::string, at::Tensor>> buffers;  // rank 0
  std::string staging;
  int64_t max_shard_bytes = 0;
  at::ScalarType param_dtype = at::kFloat;  // checkpoint.save_dtype
};

// Rank 0 writes the FULL files from `assembler`; the other owners send it
// their pieces. On a write error rank 0 keeps receiving what the owners send
// (so nobody waits forever), then throws.
void WriteFullFiles(FullAssembler& assembler, int32_t rank, const FullLayout& l, CheckpointOutput& out) {
  const size_t n = l.params;
  if (rank != 0) {
    for (size_t p = 0; p < n; ++p) assembler.Get(p, -1);
    for (size_t p = 0; p < n; ++p) {
      for (size_t f = 0; f < l.fields; ++f) assembler.Get(p, static_cast<int>(f));
    }
    return;
  }
  size_t next_model = 0, next_optim = 0;
  std::string error;
  try {
    out.ShardedSafetensors(
        l.staging, l.model,
        [&](size_t i) {
          next_model = i + 1;
          return i < n ? assembler.Get(i, -1).to(l.param_dtype) : l.buffers[i - n].second.contiguous();
        },
        l.max_shard_bytes);
    if (l.fields > 0) {
      out.Safetensors((fs::path(l.staging) / kOptimizerFile).string(), l.optim, [&](size_t i) {
        next_optim = i + 1;
        return assembler.Get(i / l.fields, static_cast<int>(i % l.fields));
      });
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (error.empty()) return;
  for (size_t i = next_model; i < n; ++i) assembler.Get(i, -1);
  for (size_t i = next_optim; i < l.optim.size(); ++i) assembler.Get(i / l.fields, static_cast<int>(i % l.fields));
  throw std::runtime_error(error);
}

// A copy that shares nothing with the training state, in host memory.
at::Tensor Frozen(const at::Tensor& t) { return t.is_cuda() ? ToHost(t, /*pinned=*/true) : t.clone(); }

// A llama model's config.json, as the job read it: beside the weights it
// makes a FULL checkpoint a Hugging Face model directory.
std::string LlamaConfigText(const ModelSpec& m) {
  const std::string path = LlamaConfigFile(LlamaConfigSource(m));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw std::runtime_error("the llama model's config " + path + " cannot be read to save it");
  return text.str();
}

void WriteFull(const TrainingState& s, const Holding& h, const std::vector<std::string>& fields,
               const std::string& staging, CheckpointOutput& out) {
  if (!h.assembles()) return;
  if (s.rank == 0 && s.spec->model.kind == ModelKind::kLlama) {
    out.Text((fs::path(staging) / "config.json").string(), LlamaConfigText(s.spec->model));
  }
  auto layout = std::make_shared<FullLayout>();
  FullLayout& l = *layout;
  l.params = h.num_params();
  l.fields = fields.size();
  l.staging = staging;
  l.max_shard_bytes = ParseSize(s.spec->checkpoint.max_shard_size);
  l.param_dtype = s.spec->checkpoint.save_dtype == SaveDtype::kBf16 ? at::kBFloat16 : at::kFloat;
  if (s.rank == 0) {
    l.buffers = Buffers(s);
    for (size_t p = 0; p < l.params; ++p) l.model.push_back({h.name(p), l.param_dtype, h.param(p).sizes().vec()});
    for (const auto& [name, t] : l.buffers) l.model.push_back({name, t.scalar_type(), t.sizes().vec()});
    for (size_t p = 0; p < l.params; ++p) {
      for (const std::string& f : fields)
        l.optim.push_back({h.name(p) + "." + f, at::kFloat, h.param(p).sizes().vec()});
    }
  }
  Collectives* full = h.full_group();
  if (out.deferred() && full != nullptr && s.checkpoint_group) {
    // Written later, on the writer thread: this rank's pieces are copied
    // now, and assembled then over the checkpoint group (the training
    // groups stay the training thread's).
    using Key = std::tuple<size_t, int64_t, int>;
    auto copies = std::make_shared<std::map<Key, at::Tensor>>();
    auto assembler =
        std::make_shared<FullAssembler>(h, s.rank, s.checkpoint_group, [copies](const Piece& piece, int field) {
          return copies->at(Key{piece.param, piece.begin, field});
        });
    int64_t bytes = 0;
    for (const Piece& piece : assembler->PiecesOf(h.my_writer())) {
      for (int f = -1; f < static_cast<int>(fields.size()); ++f) {
        at::Tensor t = Frozen(PieceData(s, h, piece, f, fields));
        bytes += static_cast<int64_t>(t.nbytes());
        (*copies)[Key{piece.param, piece.begin, f}] = std::move(t);
      }
    }
    for (auto& [name, t] : l.buffers) {
      t = Frozen(t);
      bytes += static_cast<int64_t>(t.nbytes());
    }
    const int32_t rank = s.rank;
    out.Later([assembler, layout, rank](CheckpointOutput& disk) { WriteFullFiles(*assembler, rank, *layout, disk); },
              bytes);
    return;
  }
  std::vector<at::Tensor> whole;
  if (s.fsdp == nullptr) {
    for (size_t p = 0; p < l.params; ++p) whole.push_back(h.param(p));
  }
  FullAssembler assembler(
      h, s.rank, full != nullptr ? full->process_group() : nullptr,
      [&](const Piece& piece, int field) { return PieceData(s, h, piece, field, fields); }, std::move(whole));
  WriteFullFiles(assembler, s.rank, l, out);
}

void WriteSharded(const TrainingState& s, const Holding& h, const std::vector<std::string>& fields,
                  const std::string& staging, CheckpointOutput& out) {
  const int32_t w = h.my_writer();
  if (w >= 0) {
    const std::vector<Piece> pieces = h.Owned(w);
    const auto buffers = w == 0 ? Buffers(s) : std::vector<std::pair<std::string, at::Tensor>>{};
    std::vector<TensorSpec> specs;
    for (const Piece& piece : pieces) specs.push_back({h.name(piece.param), at::kFloat, {piece.size()}});
    for (const auto& [name, t] : buffers) specs.push_back({name, t.scalar_type(), {t.numel()}});
    out.Safetensors((fs::path(staging) / ShardFile("model", w, h.writers())).string(), specs, [&](size_t i) {
      return i < pieces.size() ? PieceData(s, h, pieces[i], -1, fields).to(at::kFloat)
                               : buffers[i - pieces.size()].second.reshape({-1}).contiguous();
    });
    if (!fields.empty()) {
      std::vector<TensorSpec> ospecs;
      for (const Piece& piece : pieces) {
        for (const std::string& f : fields)
          ospecs.push_back({h.name(piece.param) + "." + f, at::kFloat, {piece.size()}});
      }
      out.Safetensors((fs::path(staging) / ShardFile("optimizer", w, h.writers())).string(), ospecs, [&](size_t i) {
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
    model[name] = {
        {"dtype", SafetensorsDtype(t.scalar_type())},
        {"shape", t.sizes().vec()},
        {"slices", {{{"file", ShardFile("model", 0, h.writers())}, {"key", name}, {"begin", 0}, {"end", t.numel()}}}}};
    total += t.numel() * static_cast<int64_t>(t.element_size());
  }
  for (int32_t writer = 0; writer < h.writers(); ++writer) {
    for (const Piece& piece : h.Owned(writer)) {
      const std::string& name = h.name(piece.param);
      model[name]["slices"].push_back({{"file", ShardFile("model", writer, h.writers())},
                                       {"key", name},
                                       {"begin", piece.begin},
                                       {"end", piece.end}});
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
  out.Text((fs::path(staging) / kShardedIndex).string(), index.dump(1) + "\n");
}

int64_t DirectoryBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

namespace checkpoint_internal {

SaveBegun BeginSave(const TrainingState& s, CheckpointType type, const CheckpointTarget& target) {
  SaveBegun b;
  b.start = std::chrono::steady_clock::now();
  b.type = type == CheckpointType::kSharded ? CheckpointType::kSharded : CheckpointType::kFull;
  b.event.index = target.index;
  b.event.step = s.step;
  b.event.type = b.type;
  b.commit.project_dir = target.project_dir;
  b.commit.index = target.index;
  b.commit.step = s.step;
  b.commit.world_size = s.world_size;
  b.commit.total_limit = target.total_limit >= 0 ? target.total_limit : s.spec->checkpoint.total_limit;
  b.commit.checksums = target.checksums;
  CheckpointDir dir(target.project_dir);
  b.commit.staging = dir.StagingPath(target.index, target.staging_tag);
  std::string error;
  if (s.rank == 0) {
    auto begun = dir.Begin(target.index, target.staging_tag);
    if (!begun.ok()) error = std::string(begun.status().message());
  }
  if (int32_t failed = FirstFailure(s, error.empty()); failed >= 0) {
    b.event = FailSave(b, s.rank, failed, error);
    b.failed = true;
  }
  return b;
}

void WriteCheckpointFiles(const TrainingState& s, CheckpointType type, int64_t index, const std::string& staging,
                          CheckpointOutput& out) {
  torch::NoGradGuard no_grad;
  const Holding h(s);
  const std::vector<std::string> all_fields = OptimizerFields(*s.spec);
  const bool has_state = HasState(*s.optimizer, h.holders());
  const std::vector<std::string> fields = has_state ? all_fields : std::vector<std::string>{};
  WriteRankState(s, staging, out);
  if (type == CheckpointType::kFull) {
    WriteFull(s, h, fields, staging, out);
  } else {
    WriteSharded(s, h, fields, staging, out);
  }
  if (s.rank == 0) WriteTrainerState(s, h, type, index, fields, has_state, staging, out);
}

CheckpointEvent FailSave(const SaveBegun& b, int32_t rank, int32_t failed_rank, const std::string& error) {
  CheckpointEvent ev = b.event;
  ev.ok = false;
  ev.error = failed_rank == rank ? error : "checkpoint failed on rank " + std::to_string(failed_rank);
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(b.commit.staging, ec);
  }
  ev.seconds = SecondsSince(b.start);
  return ev;
}

std::string CommittedPath(const CommitTarget& c) {
  return (fs::absolute(CheckpointDir(c.project_dir).root()) / ("checkpoint_" + std::to_string(c.index))).string();
}

CheckpointEvent CommitSave(const SaveBegun& b) {
  CheckpointEvent ev = b.event;
  CheckpointDir dir(b.commit.project_dir);
  nlohmann::ordered_json meta = {
      {"step", b.commit.step}, {"type", CheckpointTypeName(b.type)}, {"world_size", b.commit.world_size}};
  if (auto st = dir.Commit(b.commit.staging, b.commit.index, meta.dump(), b.commit.checksums); !st.ok()) {
    return FailSave(b, 0, 0, std::string(st.message()));
  }
  ev.ok = true;
  ev.path = CommittedPath(b.commit);
  ev.bytes = DirectoryBytes(ev.path);
  if (b.commit.total_limit > 0) {
    // Rotation trouble does not undo the checkpoint just committed.
    auto deleted = dir.ApplyTotalLimit(b.commit.total_limit);
    if (!deleted.ok()) ev.error = "total_limit: " + std::string(deleted.status().message());
  }
  ev.unix_millis = NowMillis();
  ev.seconds = SecondsSince(b.start);
  return ev;
}

}  // namespace checkpoint_internal

CheckpointEvent SaveCheckpoint(const TrainingState& s, CheckpointType type, const CheckpointTarget& target) {
  if (type == CheckpointType::kAuto) type = CheckpointType::kFull;
  SaveBegun b = BeginSave(s, type, target);
  if (b.failed) return b.event;

  std::string error;
  try {
    DiskOutput out;
    WriteCheckpointFiles(s, b.type, target.index, b.commit.staging, out);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (int32_t failed = FirstFailure(s, error.empty()); failed >= 0) return FailSave(b, s.rank, failed, error);

  CheckpointEvent ev = b.event;
  if (s.rank == 0) {
    ev = CommitSave(b);
    if (!ev.ok) error = ev.error;
  }
  if (int32_t failed = FirstFailure(s, error.empty()); failed >= 0) return FailSave(b, s.rank, failed, error);
  if (s.rank != 0) {
    ev.ok = true;
    ev.path = CommittedPath(b.commit);
    ev.unix_millis = NowMillis();
  }
  ev.seconds = SecondsSince(b.start);
  ev.blocking_seconds = ev.seconds;
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

}  // namespace trainyard
