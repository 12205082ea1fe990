#include "common/spec/spec_rules.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace trainyard::spec {

using namespace spec_reader;  // NOLINT: the rules are written in the reader's terms

void CheckModel(const MapReader& r, const ModelSpec& m) {
  if (m.init_from.empty()) {
    for (const char* key : {"init_from_strict", "init_from_prefix"}) {
      if (r.Has(key)) Fail(r.PathOf(key), "applies with init_from (a safetensors file or directory)");
    }
  }
  const bool resnet50 = m.kind == ModelKind::kResNet50;
  if (m.kind != ModelKind::kResNet && r.Has("channels")) {
    Fail(r.PathOf("channels"), resnet50 ? "does not apply to the resnet50 model: its widths are torchvision's"
                                        : "applies to the resnet model only");
  }
  if (m.kind != ModelKind::kResNet && !resnet50 && r.Has("image_size")) {
    Fail(r.PathOf("image_size"), "applies to the resnet and resnet50 models only");
  }
  if (m.kind == ModelKind::kTorchScript || m.kind == ModelKind::kResNet || resnet50) {
    for (const char* key : {"hidden", "input_size"}) {
      if (key == std::string("input_size") && m.kind == ModelKind::kTorchScript) continue;  // its flat input width
      if (r.Has(key)) Fail(r.PathOf(key), absl::StrCat("does not apply to the ", ModelKindName(m.kind), " model"));
    }
  }
  const bool gpt = m.kind == ModelKind::kGpt;
  const bool llama = m.kind == ModelKind::kLlama;
  for (const char* key : {"layers", "width", "heads", "vocab", "tied_head"}) {
    if (llama && r.Has(key)) {
      Fail(r.PathOf(key), "does not apply to the llama model: its architecture is its config.json's (model.config)");
    }
    if (!gpt && r.Has(key)) Fail(r.PathOf(key), "applies to the gpt model only");
  }
  if (!gpt && !llama && r.Has("context")) Fail(r.PathOf("context"), "applies to the gpt and llama models only");
  for (const char* key : {"hidden", "input_size", "num_classes"}) {
    if (gpt && r.Has(key))
      Fail(r.PathOf(key), "does not apply to the gpt model (it uses layers, width, heads, context, vocab)");
    if (llama && r.Has(key)) Fail(r.PathOf(key), "does not apply to the llama model (it uses config and context)");
  }
  if (!llama && r.Has("config")) Fail(r.PathOf("config"), "applies to the llama model only (its config.json)");
  if (llama && m.config.empty() && m.init_from.empty()) {
    Fail(r.PathOf("config"),
         "the llama model needs its architecture: config (a config.json) or init_from (a Hugging Face model "
         "directory with config.json)");
  }
  if (gpt && m.width % m.heads != 0) {
    Fail(r.PathOf("heads"), absl::StrCat("must divide width (", m.width, "), got ", m.heads));
  }
  if (m.kind == ModelKind::kCnn && m.input_size != 784) {
    Fail(r.PathOf("input_size"), "the cnn model takes 1x28x28 images: input_size must be 784");
  }
}

void CheckData(const MapReader& r, const DataSpec& d) {
  if (d.kind != DataKind::kTokens && r.Has("token_dtype")) Fail(r.PathOf("token_dtype"), "applies to data kind tokens");
  if (d.kind != DataKind::kTensors) {
    for (const char* key : {"inputs", "targets"}) {
      if (r.Has(key)) Fail(r.PathOf(key), "applies to data kind tensors");
    }
  }
  if (d.kind != DataKind::kTensors && d.kind != DataKind::kImageFolder) {
    for (const char* key : {"eval_fraction", "eval_path"}) {
      if (r.Has(key)) Fail(r.PathOf(key), "applies to data kinds tensors and image_folder");
    }
  }
  if (d.kind != DataKind::kImageFolder) {
    for (const char* key : {"resize", "crop_size", "random_crop", "random_flip", "mean", "std"}) {
      if (r.Has(key)) Fail(r.PathOf(key), "applies to data kind image_folder");
    }
  }
  if (r.Has("mean") != r.Has("std")) Fail(r.PathOf(r.Has("mean") ? "std" : "mean"), "give mean and std together");
  if (d.eval_fraction > 0 && !d.eval_path.empty()) {
    Fail(r.PathOf("eval_fraction"), "give eval_fraction or eval_path, not both");
  }
}

void CheckOptimizer(const MapReader& r, const OptimizerSpec& o) {
  if (o.kind == OptimizerKind::kSgd && r.Has("betas")) Fail(r.PathOf("betas"), "applies to adamw only");
  if (o.kind == OptimizerKind::kSgd && r.Has("eps")) Fail(r.PathOf("eps"), "applies to adamw only");
  if (o.kind == OptimizerKind::kAdamW && r.Has("momentum")) Fail(r.PathOf("momentum"), "applies to sgd only");
}

void CheckDdp(const MapReader& r, const DdpSpec& d) {
  if (d.comm_hook != CommHookType::kNone && d.intra_host_transport == IntraHostTransport::kSharedMemory) {
    Fail(r.PathOf("intra_host_transport"),
         "'shm' carries uncompressed fp32 gradients; comm hooks compress for the process group: use auto or "
         "process_group with a comm_hook");
  }
}

void CheckPowerSgd(const MapReader& o, const DdpSpec& d) {
  const PowerSgdOptions& ps = d.power_sgd;
  if ((ps.use_error_feedback || ps.warm_start) && ps.start_powerSGD_iter <= 1) {
    Fail(o.PathOf("start_powerSGD_iter"),
         "must be > 1 when use_error_feedback or warm_start is on (DDP rebuilds its buckets after the first "
         "step), as in PyTorch");
  }
  if (ps.batch_tensors_with_same_shape && d.comm_hook == CommHookType::kBatchedPowerSgd) {
    Fail(o.PathOf("batch_tensors_with_same_shape"),
         "applies to power_sgd; batched_power_sgd already compresses the whole bucket as one matrix");
  }
}

void CheckFsdp(const MapReader& r, const FsdpSpec& f) {
  if (r.Has("fsdp_backward_prefetch") && r.Has("fsdp_backward_prefetch_policy")) {
    Fail(r.PathOf("fsdp_backward_prefetch_policy"), "give fsdp_backward_prefetch or its older name, not both");
  }
  if (f.cpu_ram_efficient_loading && !f.sync_module_states) {
    Fail(r.PathOf("fsdp_sync_module_states"),
         "must be true with fsdp_cpu_ram_efficient_loading (only rank 0 loads weights), as in Accelerate");
  }
}

void CheckCheckpoint(const MapReader& r, const CheckpointSpec& c) {
  for (const auto& [key, value] :
       {std::pair<const char*, const std::string*>{"project_dir", &c.project_dir}, {"resume_from", &c.resume_from}}) {
    if (value->find('\0') != std::string::npos) Fail(r.PathOf(key), "must not contain NUL characters");
  }
}

void CheckScript(const MapReader& r, const ScriptSpec& s) {
  if (s.path.empty()) Fail(r.PathOf("path"), "is required: the Python script each rank runs");
}

}  // namespace trainyard::spec
