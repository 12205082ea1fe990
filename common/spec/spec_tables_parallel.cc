// The field tables of the ddp and fsdp_config sections (spec_tables.h).
#include <cctype>
#include <cstring>
#include <limits>
#include <utility>

#include "common/progress_pattern.h"
#include "common/spec/spec_rules.h"
#include "common/spec/spec_tables.h"
#include "common/spec/table_helpers.h"

namespace trainyard::spec {

// ---- ddp ----

static const Section<PowerSgdOptions>& PowerSgdTable() {
  using P = PowerSgdOptions;
  static const Section<P> sec = [] {
    Section<P> s;
    s.fields = {
        Int("matrix_approximation_rank", &P::matrix_approximation_rank, 1, 1 << 16, "PowerSGD's rank."),
        Int("start_powerSGD_iter", &P::start_powerSGD_iter, 0, int64_t{1} << 40, "Plain allreduce before this step."),
        Num("min_compression_rate", &P::min_compression_rate, 0.0, 1e12, "Below it a matrix travels uncompressed."),
        Flag("use_error_feedback", &P::use_error_feedback, "Add back the compression error."),
        Flag("warm_start", &P::warm_start, "Reuse the last step's factors."),
        Num("orthogonalization_epsilon", &P::orthogonalization_epsilon, 0.0, 1.0,
            "Gram-Schmidt's epsilon (ranks up to 2; above, PowerSGD orthogonalizes by QR, as PyTorch)."),
        Int("random_seed", &P::random_seed, 0, kMaxInt64, "Seed of the random projections."),
        Flag("batch_tensors_with_same_shape", &P::batch_tensors_with_same_shape,
             "`power_sgd`: compress same-shaped tensors together."),
    };
    return s;
  }();
  return sec;
}

static Field<DdpSpec> CommStateRow() {
  Field<DdpSpec> f = Sub("comm_state_option", &DdpSpec::power_sgd, PowerSgdTable(),
                         "PowerSGD's options (`power_sgd`, `batched_power_sgd`).");
  f.read = [](MapReader& r, DdpSpec* d, const ReadContext& ctx) {
    YAML::Node opts = r.Child("comm_state_option");
    if (!opts) return;
    const std::string p = r.PathOf("comm_state_option");
    if (!opts.IsMap()) Fail(p, "must be a mapping of PowerSGD options, got " + Describe(opts));
    if (opts.size() > 0 && !PowerSgdHook(d->comm_hook)) {
      Fail(p, absl::StrCat("comm_hook '", CommHookName(d->comm_hook),
                           "' is stateless and takes no options; they apply to power_sgd and batched_power_sgd"));
    }
    Section<PowerSgdOptions> checked = PowerSgdTable();
    checked.after = [d](MapReader& o, PowerSgdOptions*, const ReadContext&) { CheckPowerSgd(o, *d); };
    ReadSection(checked, opts, p, &d->power_sgd, ctx);
  };
  f.applies = [](const DdpSpec& d) { return PowerSgdHook(d.comm_hook); };
  return f;
}

const Section<DdpSpec>& DdpTable() {
  using D = DdpSpec;
  static const Section<D> sec = [] {
    Section<D> s;
    Field<D> wrapper = Choice("comm_wrapper", &D::comm_wrapper, kCommWrapperNames,
                              "Wraps a PowerSGD hook to communicate in fp16 or bf16.");
    wrapper.read = [](MapReader& r, D* d, const ReadContext&) {
      r.Enum<CommWrapper>("comm_wrapper", &d->comm_wrapper, kCommWrapperNames);
      if (d->comm_wrapper != CommWrapper::kNone && !PowerSgdHook(d->comm_hook)) {
        Fail(r.PathOf("comm_wrapper"),
             absl::StrCat("'", CommWrapperName(d->comm_wrapper),
                          "' wraps a stateful hook (power_sgd, batched_power_sgd); "
                          "with comm_hook '",
                          CommHookName(d->comm_hook), "' use comm_hook: fp16 or bf16 instead"));
      }
    };
    s.fields = {
        Num("bucket_cap_mb", &D::bucket_cap_mb, 0.001, 4096, "Gradient bucket size cap in MiB."),
        Choice("comm_hook", &D::comm_hook, kCommHookNames, "DDP's communication hook."),
        std::move(wrapper),
        CommStateRow(),
        Flag("find_unused_parameters", &D::find_unused_parameters, "Parameters may get no gradient."),
        Flag("gradient_as_bucket_view", &D::gradient_as_bucket_view, "Gradients are views into the buckets."),
        Flag("broadcast_buffers", &D::broadcast_buffers, "Rank 0's buffers are broadcast before every forward."),
        Choice("intra_host_transport", &D::intra_host_transport, kIntraHostTransportNames,
               "How gradients travel: shared memory within a host, the process group otherwise."),
    };
    s.after = [](MapReader& r, D* d, const ReadContext&) { CheckDdp(r, *d); };
    return s;
  }();
  return sec;
}

// ---- fsdp_config ----

static Field<FsdpSpec> ShardingRow() {
  using F = FsdpSpec;
  Field<F> f = Choice("fsdp_sharding_strategy", &F::sharding_strategy, kShardingStrategyNames,
                      "How parameters, gradients and optimizer state are sharded.");
  f.accepted += " (or 1 … 5)";
  f.read = [](MapReader& r, F* s, const ReadContext&) {
    YAML::Node n = r.Child("fsdp_sharding_strategy");
    if (!n) return;
    // Accelerate takes the name or its number (1..5).
    const std::string p = r.PathOf("fsdp_sharding_strategy");
    const auto& names = kShardingStrategyNames;
    if (!n.IsScalar()) Fail(p, "must be a strategy name or number, got " + Describe(n));
    const std::string v = n.Scalar();
    bool found = false;
    std::string accepted;
    for (size_t i = 0; i < std::size(names); ++i) {
      if (v == std::to_string(i + 1) || Lower(v) == Lower(names[i].name)) {
        s->sharding_strategy = names[i].value;
        found = true;
      }
      absl::StrAppend(&accepted, i ? ", " : "", names[i].name, " (", i + 1, ")");
    }
    if (!found) Fail(p, absl::StrCat("unknown value '", v, "'; accepted: ", accepted));
  };
  return f;
}

static Field<FsdpSpec> WrapLayersRow() {
  using F = FsdpSpec;
  Field<F> f = Own("fsdp_transformer_layer_cls_to_wrap", &F::transformer_layer_cls_to_wrap, "list of strings",
                   "1 … 64 of the model's layer types (or one comma-separated string)",
                   "TRANSFORMER_BASED_WRAP: the layer types that become FSDP units.",
                   [](MapReader& r, F* s, const ReadContext&) {
                     YAML::Node n = r.Child("fsdp_transformer_layer_cls_to_wrap");
                     if (!n) return;
                     const std::string p = r.PathOf("fsdp_transformer_layer_cls_to_wrap");
                     std::vector<std::string> names;
                     if (n.IsScalar()) {  // Accelerate writes "Block" or "BlockA,BlockB"
                       names = SplitCommaList(n.Scalar());
                     } else if (n.IsSequence()) {
                       for (const auto& e : n) {
                         if (!e.IsScalar()) Fail(p, "must list layer type names");
                         names.push_back(e.Scalar());
                       }
                     } else {
                       Fail(p, "must be a layer type name, a comma-separated list or a list, got " + Describe(n));
                     }
                     if (names.empty() || names.size() > 64) Fail(p, "must name between 1 and 64 layer types");
                     for (const std::string& name : names) {
                       if (name.size() > kMaxName || !ValidUtf8(name))
                         Fail(p, "layer type names are UTF-8, at most 128 characters");
                     }
                     s->transformer_layer_cls_to_wrap = names;
                   });
  f.applies = [](const F& s) { return !s.transformer_layer_cls_to_wrap.empty(); };
  f.random = nullptr;  // the model's layer types: spec_random.cc picks them
  return f;
}

const Section<FsdpSpec>& FsdpTable() {
  using F = FsdpSpec;
  static const Section<F> sec = [] {
    Section<F> s;
    Field<F> older = Choice("fsdp_backward_prefetch_policy", &F::backward_prefetch, kBackwardPrefetchNames,
                            "The older name of `fsdp_backward_prefetch`.");
    older.write = nullptr;
    older.diff = nullptr;
    older.random = nullptr;
    older.show = nullptr;
    Field<F> activation;  // the top-level activation_checkpointing, read there
    activation.name = "fsdp_activation_checkpointing";
    activation.type = "boolean";
    activation.accepted = "`true`, `false`";
    activation.doc = "Accelerate's name of the top-level `activation_checkpointing`.";
    activation.read = [](MapReader&, F*, const ReadContext&) {};
    s.fields = {
        ShardingRow(),
        Choice("fsdp_auto_wrap_policy", &F::auto_wrap_policy, kWrapPolicyNames, "Which modules become FSDP units."),
        WrapLayersRow(),
        Int("fsdp_min_num_params", &F::min_num_params, 1, int64_t{1} << 50,
            "SIZE_BASED_WRAP: the parameters of a unit."),
        Flag("fsdp_offload_params", &F::offload_params, "Keep the shards in host memory."),
        Choice("fsdp_backward_prefetch", &F::backward_prefetch, kBackwardPrefetchNames,
               "When the next unit's parameters are gathered in backward."),
        std::move(older),
        Flag("fsdp_forward_prefetch", &F::forward_prefetch, "Gather the next unit's parameters during forward."),
        std::move(activation),
        Choice("fsdp_state_dict_type", &F::state_dict_type, kStateDictTypeNames,
               "The layout of `auto` checkpoints under FSDP.", {"LOCAL_STATE_DICT"}),
        Flag("fsdp_sync_module_states", &F::sync_module_states, "Rank 0's weights are broadcast at start."),
        Flag("fsdp_use_orig_params", &F::use_orig_params, "The optimizer sees the original parameters."),
        Flag("fsdp_cpu_ram_efficient_loading", &F::cpu_ram_efficient_loading, "Only rank 0 loads the weights."),
        Int("ranks_per_node", &F::ranks_per_node, 0, 1 << 16, "HYBRID strategies: ranks per node (0: all)."),
    };
    s.after = [](MapReader& r, F* f, const ReadContext&) { CheckFsdp(r, *f); };
    return s;
  }();
  return sec;
}

}  // namespace trainyard::spec
