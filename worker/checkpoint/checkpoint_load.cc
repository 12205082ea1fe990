#include "worker/checkpoint/checkpoint.h"
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
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "common/checkpoint_dir.h"
#include "common/clock.h"
#include "worker/base/safetensors.h"
#include "worker/collectives/collectives.h"
#include "worker/data/data_loader.h"
#include "worker/models/models.h"
#include "worker/parallel/ddp.h"
#include "worker/parallel/fsdp.h"

namespace trainyard {
namespace fs = std::filesystem;
using namespace checkpoint_internal;  // NOLINT: this file is part of the checkpoint code

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
      out.narrow(0, x - begin, y - x)
          .copy_(ReadSafetensorRange(path, Header(sl.file), sl.key, x - sl.begin, y - sl.begin));
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

  // Every parameter and buffer must be there with its shape and dtype (a
  // FULL checkpoint saved with save_dtype bf16: its weights are converted).
  int64_t converted = 0;
  auto check = [&](const TensorSpec& t) {
    auto it = r.model.find(t.name);
    if (it == r.model.end())
      throw std::runtime_error(dir + ": checkpoint has no tensor '" + t.name + "' the model needs");
    if (it->second.shape == t.shape && it->second.dtype == at::kBFloat16 && t.dtype == at::kFloat) {
      ++converted;
    } else if (it->second.shape != t.shape || it->second.dtype != t.dtype) {
      throw std::runtime_error(dir + ": tensor '" + t.name + "' is " + SafetensorsDtype(it->second.dtype) +
                               c10::str(c10::IntArrayRef(it->second.shape)) + " in the checkpoint, " +
                               SafetensorsDtype(t.dtype) + c10::str(c10::IntArrayRef(t.shape)) + " in the model");
    }
  };
  for (const TensorSpec& t : ParamSpecs(h)) check(t);
  const auto buffers = Buffers(s);
  for (const auto& [name, t] : buffers) check({name, t.scalar_type(), t.sizes().vec()});
  if (converted > 0) {
    info.notes.push_back("weights restored from bf16 (checkpoint.save_dtype): " + std::to_string(converted) +
                         " tensors are the saved float32 weights rounded to bf16");
  }
  if (r.model.size() != h.num_params() + buffers.size()) {
    throw std::runtime_error(dir + ": checkpoint has " + std::to_string(r.model.size()) + " model tensors, the model " +
                             std::to_string(h.num_params() + buffers.size()));
  }

  const std::vector<Piece> local = h.Local();
  for (const Piece& piece : local) {
    h.holders()[piece.holder]
        .detach()
        .view({-1})
        .narrow(0, piece.holder_offset, piece.size())
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
        FieldOf(*s.optimizer, holder, f)
            .view({-1})
            .narrow(0, piece.holder_offset, piece.size())
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
  info.full = ts.value("type", "") == CheckpointTypeName(CheckpointType::kFull);
  return info;
}

// ---- Initial weights -------------------------------------------------------

std::vector<std::string> LoadInitialWeights(const TrainingState& s, const std::string& path, bool strict,
                                            const std::string& prefix) {
  CheckpointReader::Impl r;
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    r.dir = path;
    if (fs::exists(p / kModelIndex)) {
      std::ifstream idx(p / kModelIndex);
      auto index = nlohmann::json::parse(idx, nullptr, false);
      if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
        throw std::runtime_error(path + ": " + kModelIndex + " is not a Hugging Face index (no weight_map)");
      }
      std::set<std::string> files;
      for (auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
      for (const std::string& f : files) r.AddWholeFile(f, &r.model);
    } else if (fs::exists(p / kModelFile)) {
      r.AddWholeFile(kModelFile, &r.model);
    } else {
      throw std::runtime_error(path + ": holds neither " + std::string(kModelFile) + " nor " + kModelIndex);
    }
  } else if (fs::is_regular_file(p, ec)) {
    r.dir = p.parent_path().string();
    r.AddWholeFile(p.filename().string(), &r.model);
  } else {
    throw std::runtime_error(path + ": no such file or directory");
  }
  // The model's names: the file's, without the prefix.
  std::map<std::string, CheckpointReader::Impl::Entry> named;
  for (auto& [name, entry] : r.model) {
    const bool prefixed = !prefix.empty() && name.rfind(prefix, 0) == 0;
    named[prefixed ? name.substr(prefix.size()) : name] = entry;
  }
  r.model = std::move(named);

  torch::NoGradGuard no_grad;
  const Holding h(s);
  std::vector<TensorSpec> wanted = ParamSpecs(h);
  const auto buffers = Buffers(s);
  for (const auto& [name, t] : buffers) wanted.push_back({name, t.scalar_type(), t.sizes().vec()});
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> known;
  // Floating-point weights of another precision (a bf16 Hugging Face
  // checkpoint) are converted, and said so.
  std::map<std::string, int> converted;
  for (const TensorSpec& t : wanted) {
    known.insert(t.name);
    auto it = r.model.find(t.name);
    const bool floats = it != r.model.end() && at::isFloatingType(it->second.dtype) && at::isFloatingType(t.dtype);
    if (it == r.model.end()) {
      missing.push_back(prefix + t.name);
    } else if (it->second.shape == t.shape && it->second.dtype != t.dtype && floats) {
      ++converted[SafetensorsDtype(it->second.dtype) + " to " + SafetensorsDtype(t.dtype)];
    } else if (it->second.shape != t.shape || it->second.dtype != t.dtype) {
      mismatched.push_back(prefix + t.name + " is " + SafetensorsDtype(it->second.dtype) +
                           c10::str(c10::IntArrayRef(it->second.shape)) + " in the file, " + SafetensorsDtype(t.dtype) +
                           c10::str(c10::IntArrayRef(t.shape)) + " in the model");
    }
  }
  for (const auto& [name, e] : r.model) {
    if (!known.count(name)) unexpected.push_back(name);
  }
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 20; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 20) out += ", and " + std::to_string(names.size() - 20) + " more";
    return out;
  };
  std::vector<std::string> problems;
  if (!mismatched.empty()) problems.push_back("wrong shape or dtype: " + list(mismatched));
  if (strict && !missing.empty()) problems.push_back("missing: " + list(missing));
  if (strict && !unexpected.empty()) problems.push_back("unexpected: " + list(unexpected));
  if (!problems.empty()) {
    std::string message = "model.init_from " + path + " does not fit the model";
    for (const std::string& problem : problems) message += "; " + problem;
    if (strict && (!missing.empty() || !unexpected.empty())) {
      message += " (init_from_strict: false skips missing and unexpected tensors";
      message += prefix.empty() ? "; init_from_prefix removes a wrapper's prefix such as \"model.\")" : ")";
    }
    throw std::runtime_error(message);
  }
  std::vector<std::string> notes;
  if (!missing.empty()) notes.push_back("init_from: not in the file, left as initialized: " + list(missing));
  if (!unexpected.empty()) notes.push_back("init_from: not in the model, skipped: " + list(unexpected));
  for (const auto& [conversion, count] : converted) {
    notes.push_back("init_from: " + std::to_string(count) + " tensors converted from " + conversion);
  }

  for (const Piece& piece : h.Local()) {
    if (!r.model.count(h.name(piece.param))) continue;
    h.holders()[piece.holder]
        .detach()
        .view({-1})
        .narrow(0, piece.holder_offset, piece.size())
        .copy_(r.Range(r.model, h.name(piece.param), piece.begin, piece.end));
  }
  for (const auto& [name, t] : buffers) {
    if (r.model.count(name)) t.view({-1}).copy_(r.Range(r.model, name, 0, t.numel()));
  }
  return notes;
}

}  // namespace trainyard
