#include "common/spec/spec_tables.h"

#include <cctype>
#include <cstring>
#include <limits>
#include <utility>

#include "common/progress_pattern.h"
#include "common/spec/spec_rules.h"
#include "common/spec/table_helpers.h"
#include "common/webhook_url.h"

namespace trainyard::spec {

using namespace spec_reader;  // NOLINT: the readers are written in the reader's terms

std::string RangeText(int64_t lo, int64_t hi) { return absl::StrCat(lo, " … ", hi); }
std::string RangeText(double lo, double hi) { return absl::StrCat(Show(lo), " … ", Show(hi)); }

namespace {

// ---- model ----

void ReadModelKind(MapReader& r, ModelSpec* m, const ReadContext&) {
  if (YAML::Node k = r.Child("kind"); k && k.IsScalar() && Lower(k.Scalar()).rfind("torchscript:", 0) == 0) {
    m->kind = ModelKind::kTorchScript;
    m->path = k.Scalar().substr(std::strlen("torchscript:"));
    if (!ValidUtf8(m->path)) Fail(r.PathOf("kind"), "must be valid UTF-8");
    if (m->path.empty() || m->path.size() > kMaxPath)
      Fail(r.PathOf("kind"), "torchscript:PATH needs the path of a saved TorchScript module");
  } else {
    r.Enum<ModelKind>("kind", &m->kind, kModelKindNames);
    if (m->kind == ModelKind::kTorchScript)
      Fail(r.PathOf("kind"), "torchscript:PATH needs the path of a saved TorchScript module");
  }
}

Field<ModelSpec> ModelKindRow() {
  Field<ModelSpec> f =
      Own("kind", &ModelSpec::kind, "string", "`mlp`, `cnn`, `gpt`, `resnet`, `resnet50`, `llama`, `torchscript:PATH`",
          "The model (`torchscript:PATH`: a module saved by `torch.jit.script(model).save(PATH)`).", ReadModelKind);
  f.write = [](const ModelSpec& m, Json* j) {
    (*j)["kind"] = m.kind == ModelKind::kTorchScript ? "torchscript:" + m.path : std::string(ModelKindName(m.kind));
  };
  f.show = [](const ModelSpec& m) {
    return m.kind == ModelKind::kTorchScript ? "torchscript:" + m.path : std::string(ModelKindName(m.kind));
  };
  f.diff = [show = f.show](const ModelSpec& a, const ModelSpec& b,
                           const std::string& prefix) -> std::optional<std::string> {
    if (a.kind == b.kind && a.path == b.path) return std::nullopt;
    return absl::StrCat(prefix, "kind: ", show(a), " vs ", show(b));
  };
  f.random = [](Rng& g, ModelSpec* m) {
    m->kind = kModelKindNames[g.Next() % std::size(kModelKindNames)].value;
    m->path = m->kind == ModelKind::kTorchScript ? g.Word(1, 20, kPathChars) : "";
  };
  f.reset = [](ModelSpec* m) { m->kind = ModelSpec{}.kind, m->path.clear(); };
  return f;
}

Field<ModelSpec> HiddenRow() {
  Field<ModelSpec> f =
      Own("hidden", &ModelSpec::hidden, "list of integers", "at most 64 widths, each 1 … 65536",
          "`mlp`, `cnn`: the widths of the hidden layers.", [](MapReader& r, ModelSpec* m, const ReadContext&) {
            YAML::Node h = r.Child("hidden");
            if (!h) return;
            const std::string p = r.PathOf("hidden");
            if (!h.IsSequence()) Fail(p, "must be a list of layer widths, got " + Describe(h));
            if (h.size() > 64) Fail(p, "must have at most 64 layers");
            m->hidden.clear();
            for (size_t i = 0; i < h.size(); ++i) {
              const std::string pi = absl::StrCat(p, "[", i, "]");
              int64_t w = 0;
              try {
                w = h[i].as<int64_t>();
              } catch (const YAML::Exception&) {
                Fail(pi, "must be an integer, got " + Describe(h[i]));
              }
              if (w < 1 || w > (1 << 16)) Fail(pi, absl::StrCat("must be between 1 and 65536, got ", w));
              m->hidden.push_back(w);
            }
          });
  f.random = [](Rng& g, ModelSpec* m) {
    m->hidden.assign(static_cast<size_t>(g.Int(0, 4)), 0);
    for (int64_t& w : m->hidden) w = g.Int(1, 1 << 16);
  };
  return f;
}

bool Is(ModelKind k, std::initializer_list<ModelKind> kinds) {
  return std::find(kinds.begin(), kinds.end(), k) != kinds.end();
}

const Section<ModelSpec>& ModelTable() {
  using M = ModelSpec;
  using K = ModelKind;
  static const Section<M> sec = [] {
    Section<M> s;
    s.kind_shorthand = true;
    const auto gpt = [](const M& m) { return m.kind == K::kGpt; };
    s.fields = {
        ModelKindRow(),
        HiddenRow().When([](const M& m) {
          return Is(m.kind, {K::kMlp, K::kCnn});
        }),
        Int("input_size", &M::input_size, 1, 1 << 20, "`mlp`, `torchscript:PATH`: the width of the input.")
            .When([](const M& m) {
              return Is(m.kind, {K::kMlp, K::kCnn, K::kTorchScript});
            }),
        Int("num_classes", &M::num_classes, 2, 1 << 20, "The classes of the classifier models.").When([](const M& m) {
          return !Is(m.kind, {K::kGpt, K::kLlama});
        }),
        Int("layers", &M::layers, 1, 256, "`gpt`: transformer blocks.").When(gpt),
        Int("width", &M::width, 8, 1 << 14, "`gpt`: the embedding width.").When(gpt),
        Int("heads", &M::heads, 1, 256, "`gpt`: attention heads (must divide `width`).").When(gpt),
        Int("context", &M::context, 2, 1 << 16, "`gpt`, `llama`: tokens per sample.").When([](const M& m) {
          return Is(m.kind, {K::kGpt, K::kLlama});
        }),
        Int("vocab", &M::vocab, 2, 1 << 20, "`gpt`: the vocabulary size.").When(gpt),
        Flag("tied_head", &M::tied_head, "`gpt`: the output head reuses the token embedding.").When(gpt),
        Int("channels", &M::channels, 1, 4096, "`resnet`: channels of the first stage.").When([](const M& m) {
          return m.kind == K::kResNet;
        }),
        Int("image_size", &M::image_size, 8, 1024, "`resnet`, `resnet50`: the side of its square input images.")
            .When([](const M& m) {
              return Is(m.kind, {K::kResNet, K::kResNet50});
            }),
        Str("config", &M::config, kMaxPath, "`llama`: its Hugging Face `config.json` (file or directory).")
            .When([](const M& m) { return m.kind == K::kLlama && !m.config.empty(); })
            .Random([](Rng& g, M* m) { m->config = g.Word(1, 20, kPathChars); }),
        Str("init_from", &M::init_from, kMaxPath, "Initial weights: a safetensors file or a Hugging Face directory.")
            .When([](const M& m) { return !m.init_from.empty(); })
            .Random([](Rng& g, M* m) { m->init_from = g.Word(1, 20, kPathChars); }),
        Flag("init_from_strict", &M::init_from_strict, "Missing and unexpected tensors fail the job.")
            .When([](const M& m) { return !m.init_from.empty(); }),
        Str("init_from_prefix", &M::init_from_prefix, kMaxName, "Removed from the file's tensor names.")
            .When([](const M& m) { return !m.init_from.empty(); }),
    };
    s.after = [](MapReader& r, M* m, const ReadContext&) { CheckModel(r, *m); };
    return s;
  }();
  return sec;
}

// ---- data ----

void ReadDataKind(MapReader& r, DataSpec* d, const ReadContext&) {
  if (YAML::Node k = r.Child("kind"); k && k.IsScalar() && k.Scalar().find(':') != std::string::npos) {
    const std::string v = k.Scalar();
    const std::string prefix = Lower(v.substr(0, v.find(':')));
    d->path = v.substr(v.find(':') + 1);
    if (!ValidUtf8(v)) Fail(r.PathOf("kind"), "must be valid UTF-8");
    const std::optional<DataKind> kind = ValueOf(kDataKindNames, prefix);
    if (kind && *kind != DataKind::kSynthetic) {
      d->kind = *kind;
    } else {
      Fail(r.PathOf("kind"), absl::StrCat("unknown value '", v, "'; accepted: ", kDataKinds));
    }
    if (d->path.empty() || d->path.size() > kMaxPath)
      Fail(r.PathOf("kind"), absl::StrCat(prefix, ":PATH needs a path"));
    if (r.Has("path")) Fail(r.PathOf("path"), "give the path in kind (" + prefix + ":PATH) or here, not both");
  } else {
    r.Enum<DataKind>("kind", &d->kind, kDataKindNames);
    r.String("path", &d->path, kMaxPath);
    if (d->kind != DataKind::kSynthetic && d->path.empty()) {
      Fail(r.PathOf("path"),
           absl::StrCat("data kind ", DataKindName(d->kind), " needs a path; accepted kinds: ", kDataKinds));
    }
    if (d->kind == DataKind::kSynthetic && r.Has("path")) Fail(r.PathOf("path"), "synthetic data has no path");
  }
}

std::string DataKindText(const DataSpec& d) {
  return d.kind == DataKind::kSynthetic ? std::string("synthetic") : absl::StrCat(DataKindName(d.kind), ":", d.path);
}

Field<DataSpec> DataKindRow() {
  Field<DataSpec> f =
      Own("kind", &DataSpec::kind, "string",
          "`synthetic`, `mnist:DIR`, `tokens:FILE_OR_DIR`, `tensors:FILE_OR_DIR`, `image_folder:DIR` (or the path "
          "as `path`)",
          "Where the samples come from.", ReadDataKind);
  f.write = [](const DataSpec& d, Json* j) { (*j)["kind"] = DataKindText(d); };
  f.show = DataKindText;
  f.diff = [](const DataSpec& a, const DataSpec& b, const std::string& prefix) -> std::optional<std::string> {
    if (a.kind == b.kind && a.path == b.path) return std::nullopt;
    return absl::StrCat(prefix, "kind: ", DataKindText(a), " vs ", DataKindText(b));
  };
  f.random = [](Rng& g, DataSpec* d) {
    d->kind = kDataKindNames[g.Next() % std::size(kDataKindNames)].value;
    d->path = d->kind == DataKind::kSynthetic ? "" : g.Word(1, 20, kPathChars);
  };
  f.reset = [](DataSpec* d) { d->kind = DataSpec{}.kind, d->path.clear(); };
  return f;
}

Field<DataSpec> ThreeNumbers(std::string name, std::vector<double> DataSpec::*m, double lo, double hi,
                             std::string doc) {
  Field<DataSpec> f =
      Own(name, m, "list of 3 numbers", absl::StrCat("each ", RangeText(lo, hi)), std::move(doc),
          [name, m, lo, hi](MapReader& r, DataSpec* d, const ReadContext&) { r.Doubles(name, &(d->*m), 3, lo, hi); });
  f.random = [m, lo, hi](Rng& g, DataSpec* d) { d->*m = {g.Double(lo, hi), g.Double(lo, hi), g.Double(lo, hi)}; };
  return f;
}

const Section<DataSpec>& DataTable() {
  using D = DataSpec;
  using K = DataKind;
  static const Section<D> sec = [] {
    Section<D> s;
    const auto images = [](const D& d) { return d.kind == K::kImageFolder; };
    const auto held_out = [](const D& d) { return d.kind == K::kTensors || d.kind == K::kImageFolder; };
    s.fields = {
        DataKindRow(),
        Choice("token_dtype", &D::token_dtype, kTokenDtypeNames, "`tokens`: the width of a token id in the files.")
            .When([](const D& d) { return d.kind == K::kTokens; }),
        Str("inputs", &D::inputs, kMaxName, "`tensors`: the name of the inputs tensor.").When([](const D& d) {
          return d.kind == K::kTensors;
        }),
        Str("targets", &D::targets, kMaxName, "`tensors`: the name of the targets tensor.").When([](const D& d) {
          return d.kind == K::kTensors;
        }),
        Num("eval_fraction", &D::eval_fraction, 0.0, 0.9, "`tensors`, `image_folder`: the share held out.")
            .When(held_out),
        Str("eval_path", &D::eval_path, kMaxPath, "`tensors`, `image_folder`: held-out data elsewhere.").When(held_out),
        Int("resize", &D::resize, 0, 8192, "`image_folder`: the shorter side after resizing (0: `crop_size`).")
            .When(images),
        Int("crop_size", &D::crop_size, 0, 8192, "`image_folder`: the square crop (0: the model's input side).")
            .When(images),
        Flag("random_crop", &D::random_crop, "`image_folder`: RandomCrop instead of the center crop.").When(images),
        Flag("random_flip", &D::random_flip, "`image_folder`: RandomHorizontalFlip.").When(images),
        ThreeNumbers("mean", &D::mean, -1e3, 1e3, "`image_folder`: Normalize's mean (with `std`).")
            .When([](const D& d) { return d.kind == K::kImageFolder && !d.mean.empty(); }),
        ThreeNumbers("std", &D::std, 1e-6, 1e3, "`image_folder`: Normalize's std (with `mean`).").When([](const D& d) {
          return d.kind == K::kImageFolder && !d.mean.empty();
        }),
        Int("batch_size", &D::batch_size, 1, 1 << 16, "Per rank and micro-batch."),
        Int("num_samples", &D::num_samples, 1, int64_t{1} << 34, "The dataset's size (synthetic, tokens)."),
        Int("seed", &D::seed, 0, kMaxInt64, "Seed of the synthetic samples and of the shuffle."),
        Flag("shuffle", &D::shuffle, "Reshuffle every epoch."),
        Flag("drop_last", &D::drop_last, "Drop the tail that does not fill every rank."),
        Int("num_workers", &D::num_workers, 0, 64, "Loader threads (0: the training thread reads)."),
        Int("prefetch_batches", &D::prefetch_batches, 1, 1024, "Batches the loader threads keep ready."),
    };
    s.after = [](MapReader& r, D* d, const ReadContext&) { CheckData(r, *d); };
    return s;
  }();
  return sec;
}

// ---- optimizer, scheduler ----

Field<OptimizerSpec> BetasRow() {
  using O = OptimizerSpec;
  Field<O> f;
  f.name = "betas";
  f.type = "list of 2 numbers";
  f.accepted = "each in [0, 1)";
  f.doc = "`adamw`: [beta1, beta2].";
  f.read = [](MapReader& r, O* o, const ReadContext&) {
    YAML::Node b = r.Child("betas");
    if (!b) return;
    const std::string p = r.PathOf("betas");
    if (!b.IsSequence() || b.size() != 2) Fail(p, "must be a list of two numbers [beta1, beta2]");
    try {
      o->beta1 = b[0].as<double>();
      o->beta2 = b[1].as<double>();
    } catch (const YAML::Exception&) {
      Fail(p, "must be a list of two numbers [beta1, beta2]");
    }
    if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1)) Fail(p, "each beta must be in [0, 1)");
  };
  f.write = [](const O& o, Json* j) { (*j)["betas"] = {o.beta1, o.beta2}; };
  f.show = [](const O& o) { return Show(std::vector<double>{o.beta1, o.beta2}); };
  f.diff = [show = f.show](const O& a, const O& b, const std::string& prefix) -> std::optional<std::string> {
    if (a.beta1 == b.beta1 && a.beta2 == b.beta2) return std::nullopt;
    return absl::StrCat(prefix, "betas: ", show(a), " vs ", show(b));
  };
  f.random = [](Rng& g, O* o) {
    o->beta1 = g.Double(0, 0.999);
    o->beta2 = g.Double(0, 0.999);
  };
  f.reset = [](O* o) { o->beta1 = O{}.beta1, o->beta2 = O{}.beta2; };
  f.applies = [](const O& o) { return o.kind == OptimizerKind::kAdamW; };
  return f;
}

const Section<OptimizerSpec>& OptimizerTable() {
  using O = OptimizerSpec;
  static const Section<O> sec = [] {
    Section<O> s;
    const auto adamw = [](const O& o) { return o.kind == OptimizerKind::kAdamW; };
    s.fields = {
        Choice("kind", &O::kind, kOptimizerKindNames, "`torch::optim::SGD` / `AdamW`."),
        Num("lr", &O::lr, 0.0, 1e3, "The peak learning rate."),
        Num("weight_decay", &O::weight_decay, 0.0, 1e3, "Weight decay (PyTorch's AdamW defaults to 0.01)."),
        Num("momentum", &O::momentum, 0.0, 1.0, "`sgd` only.").When([](const O& o) {
          return o.kind == OptimizerKind::kSgd;
        }),
        BetasRow(),
        Num("eps", &O::eps, 0.0, 1.0, "`adamw` only.").When(adamw),
    };
    s.after = [](MapReader& r, O* o, const ReadContext&) { CheckOptimizer(r, *o); };
    return s;
  }();
  return sec;
}

const Section<SchedulerSpec>& SchedulerTable() {
  using S = SchedulerSpec;
  static const Section<S> sec = [] {
    Section<S> s;
    s.kind_shorthand = true;
    s.fields = {
        Choice("kind", &S::kind, kSchedulerKindNames, "The shape after the warmup."),
        Int("warmup_steps", &S::warmup_steps, 0, int64_t{1} << 40, "Steps of linear warmup (at most `max_steps`)."),
    };
    return s;
  }();
  return sec;
}

const Section<FusedSpec>& FusedTable() {
  using F = FusedSpec;
  static const Section<F> sec = [] {
    Section<F> s;
    s.fields = {
        Flag("optimizer", &F::optimizer, "`adamw`: ATen's fused AdamW over every parameter at once."),
        Flag("rms_norm", &F::rms_norm, "`llama`: ATen's `rms_norm` (fused on CUDA)."),
        Flag("chunked_loss", &F::chunked_loss,
             "`llama` (one process, DDP): output projection and cross-entropy by chunks, without the whole logits."),
        Choice("attention", &F::attention, kAttentionBackendNames,
               "The attention backend (SDPA): `auto` is ATen's choice; another is forced."),
        Choice("cuda_graph", &F::cuda_graph, kStepCaptureNames,
               "The step captured once as a CUDA graph and replayed: `auto` where it applies, `on` requires it "
               "(refused where it cannot apply)."),
    };
    return s;
  }();
  return sec;
}

// ---- checkpoint ----

const Section<CheckpointSpec>& CheckpointTable() {
  using C = CheckpointSpec;
  static const Section<C> sec = [] {
    Section<C> s;
    Field<C> shard =
        Str("max_shard_size", &C::max_shard_size, 32, "Largest model.safetensors file of a FULL checkpoint.");
    shard.accepted = "a size: `10GB`, `500MB`, `123` (bytes)";
    shard.read = [](MapReader& r, C* c, const ReadContext&) {
      r.String("max_shard_size", &c->max_shard_size, 32);
      try {
        ParseSize(c->max_shard_size);
      } catch (const std::invalid_argument& e) {
        Fail(r.PathOf("max_shard_size"), e.what());
      }
    };
    shard.random = [](Rng& g, C* c) {
      c->max_shard_size =
          absl::StrCat(g.Int(1, 999), std::vector<std::string>{"", "KB", "MB", "GB", "MiB"}[g.Next() % 5]);
    };
    s.fields = {
        Str("project_dir", &C::project_dir, kMaxPath, "Checkpoints go to <project_dir>/checkpoints/."),
        Int("every_steps", &C::every_steps, 0, int64_t{1} << 40, "Save every this many steps (0: on request)."),
        Int("total_limit", &C::total_limit, 0, 1 << 20, "Keep at most this many complete checkpoints (0: all)."),
        Str("resume_from", &C::resume_from, kMaxPath, "`latest` or a checkpoint directory; empty: fresh."),
        std::move(shard),
        Choice("type", &C::type, kCheckpointTypeNames, "Periodic checkpoints' layout."),
        Choice("save_dtype", &C::save_dtype, kSaveDtypeNames, "The weights' dtype in FULL checkpoints."),
        Flag("save_final", &C::save_final, "Save a FULL checkpoint when training ends."),
        Flag("async", &C::async, "Write saves in the background."),
        Int("snapshot_every_steps", &C::snapshot_every_steps, 0, int64_t{1} << 40,
            "Shared-memory snapshots every this many steps (0: off)."),
    };
    s.after = [](MapReader& r, C* c, const ReadContext&) { CheckCheckpoint(r, *c); };
    return s;
  }();
  return sec;
}

// ---- fault_tolerance, elastic ----

const Section<FaultToleranceSpec>& FaultToleranceTable() {
  using F = FaultToleranceSpec;
  static const Section<F> sec = [] {
    Section<F> s;
    s.fields = {
        Choice("mode", &F::mode, kFaultToleranceModeNames,
               "`whole_group`: a lost rank restarts every rank; `replica`: the others go on while it heals; "
               "`fail_fast`: a lost rank fails the job."),
        Int("min_replicas", &F::min_replicas, 1, kMaxNumProcessesCeiling,
            "`replica`: fewer live replicas than this restart the whole group."),
        Num("collective_timeout_s", &F::collective_timeout_s, 1.0, 86400.0,
            "`replica`: a collective that waits this long for a member fails; the others go on without it."),
    };
    return s;
  }();
  return sec;
}

const Section<ElasticSpec>& ElasticTable() {
  using E = ElasticSpec;
  static const Section<E> sec = [] {
    Section<E> s;
    s.fields = {
        Int("min_processes", &E::min_processes, 0, kMaxNumProcessesCeiling,
            "Start with this many ranks and grow to `num_processes` (0: not elastic)."),
    };
    return s;
  }();
  return sec;
}

const Section<NotifySpec>& NotifyTable() {
  using N = NotifySpec;
  static const Section<N> sec = [] {
    Section<N> s;
    Field<N> urls =
        Own("urls", &N::urls, "list of strings", "at most 8 http:// or https:// URLs, no credentials",
            "Where the coordinator POSTs the job (JSON, signed).", [](MapReader& r, N* s, const ReadContext&) {
              YAML::Node n = r.Child("urls");
              if (!n) return;
              const std::string p = r.PathOf("urls");
              s->urls = StringList(n, p, 8, 2048, "each entry must be a URL string, got ");
              for (size_t i = 0; i < s->urls.size(); ++i) {
                if (auto u = ParseWebhookUrl(s->urls[i]); !u.ok()) {
                  Fail(absl::StrCat(p, "[", i, "]"), std::string(u.status().message()));
                }
              }
            });
    urls.random = [](Rng& g, N* s) {
      s->urls.clear();
      if (g.Coin(0.2)) s->urls.push_back("https://" + g.Word(1, 10, "abcdefghij") + ".example/hook");
    };
    Field<N> on =
        Own("on", &N::on, "list of strings", "`SUCCEEDED`, `FAILED`, `CANCELLED`, `RUNNING`, `PREEMPTED`",
            "The states that call the URLs.", [](MapReader& r, N* s, const ReadContext&) {
              YAML::Node n = r.Child("on");
              if (!n) return;
              const std::string p = r.PathOf("on");
              s->on = StringList(n, p, 5, 16, "each entry must be a state name, got ");
              for (std::string& v : s->on) {
                for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
                if (v != "SUCCEEDED" && v != "FAILED" && v != "CANCELLED" && v != "RUNNING" && v != "PREEMPTED") {
                  Fail(p, "'" + v + "': one of SUCCEEDED, FAILED, CANCELLED, RUNNING, PREEMPTED");
                }
              }
            });
    s.fields = {std::move(urls), std::move(on)};
    return s;
  }();
  return sec;
}

// ---- top level ----

Field<JobSpec> ScriptRow() {
  Field<JobSpec> f = Sub("script", &JobSpec::script, ScriptTable(), "A script job: each rank runs a Python script.");
  f.read = [](MapReader& r, JobSpec* s, const ReadContext& ctx) {
    YAML::Node n = r.Child("script");
    if (!n) return;
    ReadSection(ScriptTable(), n, "script", &s->script, ctx);
    // The script does its own training: a field only Trainyard's trainer
    // reads would be silently ignored, so it is refused instead.
    for (const char* key : kScriptRefusedTrainerFields) {
      if (ctx.root[key]) Fail(key, "applies to built-in models; a script job's script sets it (script.args)");
    }
    for (const char* key : kScriptRefusedAccelerateFields) {
      if (ctx.root[key]) Fail(key, "a script job takes it from its Accelerate config (--accelerate-config)");
    }
  };
  f.applies = [](const JobSpec& s) { return !s.script.empty(); };
  return f;
}

Field<JobSpec> FsdpRow() {
  Field<JobSpec> f =
      Sub("fsdp_config", &JobSpec::fsdp, FsdpTable(), "FSDP's options (Accelerate's fsdp_config), with FSDP.");
  f.read = [](MapReader& r, JobSpec* s, const ReadContext& ctx) {
    YAML::Node n = r.Child("fsdp_config");
    if (!n) return;
    const bool top = s->activation_checkpointing;
    Section<FsdpSpec> with_activation = FsdpTable();
    with_activation.before_unknown = [s](MapReader& fr, FsdpSpec*, const ReadContext&) {
      fr.Bool("fsdp_activation_checkpointing", &s->activation_checkpointing);
    };
    ReadSection(with_activation, n, "fsdp_config", &s->fsdp, ctx);
    if (r.Has("activation_checkpointing") && s->activation_checkpointing != top) {
      Fail("fsdp_config.fsdp_activation_checkpointing", "contradicts activation_checkpointing; give one of them");
    }
  };
  f.applies = [](const JobSpec& s) { return s.distributed_type == DistributedType::kFsdp; };
  return f;
}

}  // namespace

const Section<JobSpec>& JobSpecTable() {
  using J = JobSpec;
  static const Section<J> sec = [] {
    Section<J> s;
    Field<J> name = Str("name", &J::name, kMaxName, "Display name (not unique; the id is).");
    name.accepted = "1 … 128 characters: letters, digits, `-`, `_`, `.`";
    name.read = [](MapReader& r, J* s, const ReadContext&) {
      r.String("name", &s->name, kMaxName);
      if (s->name.empty()) Fail("name", "must not be empty");
      for (char c : s->name) {
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
          Fail("name", "may contain only letters, digits, '-', '_' and '.'");
        }
      }
    };
    name.random = [](Rng& g, J* s) { s->name = g.Word(1, 20, kWordChars); };
    Field<J> processes =
        Int("num_processes", &J::num_processes, 1, kMaxNumProcessesCeiling, "World size: one worker process per rank.");
    processes.accepted = "1 … the server's --max-num-processes (default 10000)";
    processes.read = [](MapReader& r, J* s, const ReadContext& ctx) {
      r.Int("num_processes", &s->num_processes, 1, ctx.limits.max_num_processes);
    };
    processes.random = [](Rng& g, J* s) { s->num_processes = static_cast<int32_t>(g.Int(1, 64)); };
    s.fields = {
        std::move(name),
        ScriptRow(),
        Sub("model", &J::model, ModelTable(), "The model (`model: mlp` is short for `{kind: mlp}`)."),
        Sub("data", &J::data, DataTable(), "The training data."),
        Sub("optimizer", &J::optimizer, OptimizerTable(), "The optimizer."),
        Sub("fused", &J::fused, FusedTable(), "ATen's fused kernels, each switchable for ablation."),
        Sub("ddp", &J::ddp, DdpTable(), "DDP's options."),
        Flag("activation_checkpointing", &J::activation_checkpointing,
             "`gpt`, `llama`: recompute each transformer layer in backward."),
        FsdpRow(),
        Int("max_steps", &J::max_steps, 1, int64_t{1} << 40, "Optimizer steps to run."),
        std::move(processes),
        Choice("device", &J::device, kDeviceNames, "Where the ranks compute."),
        Choice("backend", &J::backend, kBackendNames, "The collective backend (`auto`: Gloo on cpu, NCCL on cuda)."),
        Choice("distributed_type", &J::distributed_type, kDistributedTypeNames, "DDP, FSDP or one process (NO)."),
        Choice("mixed_precision", &J::mixed_precision, kMixedPrecisionNames, "Autocast and loss scaling."),
        Int("seed", &J::seed, 0, kMaxInt64, "Model initialization seed."),
        Int("threads_per_process", &J::threads_per_process, 1, 256, "LibTorch intra-op threads per worker."),
        Int("metrics_every_steps", &J::metrics_every_steps, 1, kMaxInt, "Workers send metrics every this many steps."),
        Int("max_restarts", &J::max_restarts, 0, 1000, "Whole-group restarts after a failure."),
        Num("step_timeout_s", &J::step_timeout_s, 0.0, 7 * 86400.0, "Hang watchdog (0: off)."),
        Num("reattach_timeout_s", &J::reattach_timeout_s, 1.0, 86400.0,
            "How long ranks have to reconnect to a restarted coordinator."),
        Flag("preemptible", &J::preemptible, "A preempted job is queued again."),
        Num("preemption_grace_s", &J::preemption_grace_s, 1.0, 86400.0, "What a preempted worker has to checkpoint."),
        Str("priority", &J::priority, kMaxName, "The job's priority class; empty: the server's default."),
        Num("max_grad_norm", &J::max_grad_norm, 0.0, 1e9, "Clip gradients to this global L2 norm (0: off)."),
        Sub("checkpoint", &J::checkpoint, CheckpointTable(), "Where and when the job saves its state."),
        Int("gradient_accumulation_steps", &J::gradient_accumulation_steps, 1, 1 << 16,
            "Micro-batches per optimizer step."),
        Num("clip_grad_value", &J::clip_grad_value, 0.0, 1e9, "Clamp gradient elements to [-v, v] (0: off)."),
        Sub("scheduler", &J::scheduler, SchedulerTable(), "The learning-rate schedule."),
        Choice("loss", &J::loss, kLossKindNames, "The loss (`mse`: torchscript models only)."),
        Int("eval_every_steps", &J::eval_every_steps, 0, int64_t{1} << 40,
            "Evaluate every this many steps (0: never)."),
        Int("eval_batches", &J::eval_batches, 1, 1 << 20, "Held-out batches per rank per evaluation."),
        Choice("launcher", &J::launcher, kLauncherKindNames, "What starts the ranks."),
        Sub("slurm", &J::slurm, SlurmTable(), "The Slurm batch job's options."),
        Sub("fault_tolerance", &J::fault_tolerance, FaultToleranceTable(), "What a lost rank does to the job."),
        Sub("elastic", &J::elastic, ElasticTable(), "A job that grows and shrinks between bounds."),
        Sub("notify", &J::notify, NotifyTable(), "Webhooks called when the job reaches the states of `on`."),
    };
    s.before_unknown = [](MapReader& r, J*, const ReadContext&) {
      for (const char* key : {"owner", "group", "user"}) {
        if (r.Has(key)) Fail(key, "a job belongs to the user who submits it (their token); a spec cannot name one");
      }
    };
    return s;
  }();
  return sec;
}

void ReadNotify(const YAML::Node& node, const std::string& path, NotifySpec* out) {
  ReadSection(NotifyTable(), node, path, out, ReadContext{});
}

}  // namespace trainyard::spec
