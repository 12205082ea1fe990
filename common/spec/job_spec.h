// JobSpec: the typed form of a job's YAML/JSON spec. Parsed once at the edge
// (ParseJobSpec), validated field by field, and serialized back to canonical
// JSON (JobSpecToJson) for storage and for the workers. Plain data: copy
// freely; no synchronization needed.
#ifndef TRAINYARD_COMMON_SPEC_JOB_SPEC_H_
#define TRAINYARD_COMMON_SPEC_JOB_SPEC_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec/spec_enums.h"

namespace trainyard {

struct ModelSpec {
  ModelKind kind = ModelKind::kMlp;
  // mlp: widths of the hidden layers (input 784, output num_classes).
  std::vector<int64_t> hidden = {128};
  // Width of the input (mlp) — 784 = 28x28 MNIST-shaped images.
  int64_t input_size = 784;
  int64_t num_classes = 10;
  // gpt: a decoder-only transformer on token ids.
  int64_t layers = 4;
  int64_t width = 256;
  int64_t heads = 4;
  // gpt and llama: the sequence length of a sample (llama: at most the
  // config's max_position_embeddings).
  int64_t context = 128;
  int64_t vocab = 512;
  bool tied_head = true;  // the output head reuses the token embedding
  // resnet: ResNet-18 for 3x32x32 images; channels of its first stage
  // (64 in the paper; later stages double it).
  int64_t channels = 64;
  // resnet: the side of its square input images (3 x image_size x image_size).
  int64_t image_size = 32;
  // torchscript:PATH — a module saved by torch.jit.script(model).save(PATH).
  std::string path;
  // llama: the Hugging Face config.json of the architecture (the file, or a
  // directory holding it). Empty: init_from's directory gives it.
  std::string config;
  // Initial weights (fine-tuning): a safetensors file, or a directory in
  // Hugging Face's layout (model.safetensors, or model.safetensors.index.json
  // and its shards). Names are the model's state-dict names, after removing
  // init_from_prefix (e.g. "model.") from the file's; bf16 or fp16 weights
  // are converted. Strict: a missing, unexpected, wrong-shape or (not
  // floating-point) wrong-dtype tensor fails the job at start;
  // not strict: missing and unexpected ones are listed and skipped. A job
  // that resumes from a checkpoint starts from the checkpoint instead.
  std::string init_from;
  bool init_from_strict = true;
  std::string init_from_prefix;
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const ModelSpec&) const = default;
};

// Where a llama model's config.json is: `config`, or else init_from.
inline const std::string& LlamaConfigSource(const ModelSpec& m) { return m.config.empty() ? m.init_from : m.config; }

struct DataSpec {
  DataKind kind = DataKind::kSynthetic;
  // Per-rank micro-batch size.
  int64_t batch_size = 64;
  // Size of the dataset (synthetic: number of generated samples). Ranks draw
  // disjoint shards of it, in the manner of PyTorch's DistributedSampler.
  int64_t num_samples = 60000;
  // Seed of the synthetic data and of the per-epoch shuffle.
  uint64_t seed = 1234;
  // Reshuffle every epoch (DistributedSampler's shuffle).
  bool shuffle = true;
  // Drop the tail that does not fill every rank (DistributedSampler's
  // drop_last) instead of padding it by wrapping around.
  bool drop_last = false;
  // Threads that read and collate the next batches while the step computes
  // (torch DataLoader's num_workers; 0: the training thread reads), and how
  // many batches they keep ready (its prefetch_factor, per loader here).
  int32_t num_workers = 0;
  int32_t prefetch_batches = 2;
  // mnist:DIR (the four IDX files, gzip or not), tokens:FILE_OR_DIR (flat
  // token ids; a directory's *.bin shards in name order, one stream) or
  // tensors:FILE_OR_DIR (safetensors files; a directory's *.safetensors
  // in name order, their samples one after another).
  std::string path;
  // tokens: the width of a token id in the files.
  TokenDtype token_dtype = TokenDtype::kUint16;
  // tensors: the names of the input and target tensors; samples are their
  // first dimension (targets int64 class indices).
  std::string inputs = "inputs";
  std::string targets = "targets";
  // tensors: the held-out split for evaluation — the last eval_fraction of
  // the samples, or the files at eval_path (then all samples train).
  double eval_fraction = 0;
  std::string eval_path;
  // image_folder: torchvision's transforms, in this order: Resize(resize)
  // (the shorter side; 0: crop_size), CenterCrop(crop_size) — for training,
  // RandomCrop(crop_size) with random_crop — RandomHorizontalFlip() for
  // training with random_flip, ToTensor(), and Normalize(mean, std) when
  // given. crop_size 0: the model's input size. Models of one input channel
  // get the images in grayscale (PIL's convert("L")).
  int64_t resize = 0;
  int64_t crop_size = 0;
  bool random_crop = false;
  bool random_flip = false;
  std::vector<double> mean, std;
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const DataSpec&) const = default;
};

// Learning-rate schedule over max_steps optimizer steps (Hugging Face's
// get_constant_schedule_with_warmup / get_linear_schedule_with_warmup /
// get_cosine_schedule_with_warmup).
struct SchedulerSpec {
  SchedulerKind kind = SchedulerKind::kConstant;
  int64_t warmup_steps = 0;
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const SchedulerSpec&) const = default;
};

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double weight_decay = 0.0;  // AdamW default in Trainyard: 0.0 (PyTorch: 0.01)
  double momentum = 0.0;      // sgd only
  double beta1 = 0.9;         // adamw only
  double beta2 = 0.999;       // adamw only
  double eps = 1e-8;          // adamw only
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const OptimizerSpec&) const = default;
};

// ATen's fused kernels in the built-in trainer: each on by default where it
// applies, each switchable for ablation (docs/reference/job-spec.md).
struct FusedSpec {
  // optimizer.kind adamw: ATen's _fused_adamw_ over all parameters at once
  // (torch.optim.AdamW(fused=True)); off: torch::optim::AdamW, one
  // parameter at a time.
  bool optimizer = true;
  // llama: at::rms_norm (a fused kernel on CUDA when the weight's dtype is
  // the input's); off: transformers' LlamaRMSNorm written out.
  bool rms_norm = true;
  // llama on one process or DDP: the output projection and cross-entropy
  // chunk by chunk, never holding the [tokens, vocab] logits (Liger-Kernel's
  // method); off: the whole logits, then the loss.
  bool chunked_loss = true;
  // The scaled_dot_product_attention backend (gpt, llama, attention).
  AttentionBackend attention = AttentionBackend::kAuto;
  // The whole step (forward, backward, clipping, fused AdamW) captured once
  // as a CUDA graph and replayed with the learning rate as a device tensor:
  // auto where StepCaptureRefusal finds nothing against it, on (refused
  // at submit where it cannot apply), off.
  StepCapture cuda_graph = StepCapture::kAuto;
  bool operator==(const FusedSpec&) const = default;
};

// PyTorch's PowerSGDState options, with its defaults.
struct PowerSgdOptions {
  int32_t matrix_approximation_rank = 1;
  int64_t start_powerSGD_iter = 1000;  // plain allreduce before this step
  double min_compression_rate = 2.0;   // below it a matrix travels uncompressed
  bool use_error_feedback = true;
  bool warm_start = true;
  double orthogonalization_epsilon = 0.0;
  uint64_t random_seed = 0;
  bool batch_tensors_with_same_shape = false;
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const PowerSgdOptions&) const = default;
};

struct DdpSpec {
  // Bucket size cap in MiB (PyTorch's bucket_cap_mb, default 25).
  double bucket_cap_mb = 25.0;
  CommHookType comm_hook = CommHookType::kNone;
  CommWrapper comm_wrapper = CommWrapper::kNone;
  PowerSgdOptions power_sgd;  // comm_state_option of the PowerSGD hooks
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = true;
  // Rank 0's buffers (BatchNorm statistics) are broadcast before every
  // forward, as PyTorch's DDP(broadcast_buffers=True).
  bool broadcast_buffers = true;
  // auto: shared memory when every rank is on one host and device is cpu,
  // else the process group (Gloo/NCCL). shm: require shared memory.
  // process_group: always the process group.
  IntraHostTransport intra_host_transport = IntraHostTransport::kAuto;
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const DdpSpec&) const = default;
};

// FSDP (Accelerate's fsdp_config).

struct FsdpSpec {
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;  // fsdp_sharding_strategy
  WrapPolicy auto_wrap_policy = WrapPolicy::kNoWrap;                  // fsdp_auto_wrap_policy
  std::vector<std::string> transformer_layer_cls_to_wrap;             // e.g. ["Block"]
  int64_t min_num_params = 100000000;                                 // fsdp_min_num_params (Accelerate: 1e8)
  bool offload_params = false;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  bool forward_prefetch = false;
  StateDictType state_dict_type = StateDictType::kFullStateDict;
  bool sync_module_states = true;
  bool use_orig_params = true;
  bool cpu_ram_efficient_loading = true;
  // Ranks per "node" for HYBRID strategies (0: every rank on one node).
  // Lets one machine stand for several nodes.
  int32_t ranks_per_node = 0;
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const FsdpSpec&) const = default;
};

// Checkpoints (Accelerate's ProjectConfiguration and save_state/load_state).

struct CheckpointSpec {
  // Checkpoints go to <project_dir>/checkpoints/checkpoint_<N>/. Empty: the
  // server assigns <state_dir>/jobs/<job id>.
  std::string project_dir;
  // Save every this many steps; 0 = only on request and at the end.
  int64_t every_steps = 0;
  // Keep at most this many complete checkpoints (0 = all); the newest
  // complete one is never deleted.
  int32_t total_limit = 0;
  // "" (start fresh), "latest" (the newest complete checkpoint of
  // project_dir, or fresh when there is none) or a checkpoint directory.
  std::string resume_from;
  // Largest model.safetensors file of a FULL checkpoint ("10GB", "500MB",
  // bytes), as Accelerate's save_model.
  std::string max_shard_size = "10GB";
  // The dtype of the model weights in FULL checkpoints: float32, or bf16
  // (half the size, as models are shared; resuming from one restores the
  // bf16-rounded weights). The optimizer state stays float32.
  SaveDtype save_dtype = SaveDtype::kFloat32;
  // Periodic checkpoints: auto = fsdp_state_dict_type under FSDP, else full.
  CheckpointType type = CheckpointType::kAuto;
  // Save the final model as a FULL checkpoint when training ends.
  bool save_final = true;
  // Periodic and requested saves copy the state into host memory at the
  // step boundary and are written in the background while training goes on.
  bool async = true;
  // Every this many steps each rank keeps its state in the host's shared
  // memory; a restarted group resumes from the newest complete snapshot when
  // it is newer than the latest checkpoint. 0 = off.
  int64_t snapshot_every_steps = 0;
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const CheckpointSpec&) const = default;
};

// Slurm submission options (launcher: slurm). Empty fields are left to the
// cluster's defaults.
struct SlurmSpec {
  int32_t nodes = 1;                    // sbatch --nodes; num_processes must be a multiple
  std::string partition;                // --partition
  std::string account;                  // --account
  std::string qos;                      // --qos
  std::string time_limit;               // --time (e.g. "2:00:00", "1-00:00:00")
  std::string constraint;               // --constraint
  std::vector<std::string> extra_args;  // further sbatch options, each "--name[=value]"
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const SlurmSpec&) const = default;
};

// What happens when a rank is lost (docs/design/fault-tolerance.md).
struct FaultToleranceSpec {
  FaultToleranceMode mode = FaultToleranceMode::kWholeGroup;
  // mode replica: with fewer live replicas than this the job falls back to
  // a whole-group restart.
  int32_t min_replicas = 1;
  // mode replica: a collective of the replicas' groups that waits this long
  // for a member fails; the others then go on in the next membership
  // without the member the coordinator finds lost (a rank whose node was
  // cut off keeps its streams open: its peers would otherwise wait for it).
  double collective_timeout_s = 60.0;
  bool operator==(const FaultToleranceSpec&) const = default;
};

// An elastic job (fault_tolerance.mode replica): it starts with
// min_processes free slots and grows to num_processes as slots free up; the
// scheduler shrinks it (down to min_processes) before it preempts anyone.
struct ElasticSpec {
  int32_t min_processes = 0;  // 0: not elastic (the job needs num_processes slots to start)
  bool enabled() const { return min_processes > 0; }
  bool operator==(const ElasticSpec&) const = default;
};

// Webhooks (docs/reference/notifications.md): the coordinator POSTs the
// job to each of `urls` when it reaches one of `on`.
struct NotifySpec {
  std::vector<std::string> urls;  // http:// or https:// (common/webhook_url.h), at most 8
  // SUCCEEDED, FAILED, CANCELLED, RUNNING, PREEMPTED (queued again by a
  // preemption).
  std::vector<std::string> on = {"SUCCEEDED", "FAILED", "CANCELLED"};
  bool operator==(const NotifySpec&) const = default;
};

// A script job (`script:` in the spec): each rank runs the user's Python
// script as the child of its trainyard-worker, with the environment
// `accelerate launch` (and torchrun) gives a rank. The native engine's
// fields (model, data, optimizer...) do not apply.
struct ScriptSpec {
  std::string path;                        // the script (under the allowed roots); empty: a native job
  std::vector<std::string> args;           // its command-line arguments
  std::string python;                      // interpreter; empty: the server's --script-python
  std::string working_dir;                 // empty: the script's directory
  std::map<std::string, std::string> env;  // added to the rank's environment
  // The Accelerate config the job came with (YAML), from which each rank's
  // ACCELERATE_* and FSDP_* variables are computed; empty: none (the ranks
  // get torchrun's variables only).
  std::string accelerate_config;
  // Progress read from rank 0's output (common/progress_pattern.h); empty:
  // only what the script reports with the `trainyard` package.
  std::string progress;
  bool empty() const { return path.empty(); }
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const ScriptSpec&) const = default;
};

// Top-level spec fields a script job refuses: those only the built-in
// trainer reads (the script sets them), then those the script takes from its
// Accelerate config. One list for the parser's refusals and the JSON form.
inline constexpr const char* kScriptRefusedTrainerFields[] = {"model",
                                                              "fused",
                                                              "data",
                                                              "optimizer",
                                                              "scheduler",
                                                              "loss",
                                                              "max_steps",
                                                              "seed",
                                                              "max_grad_norm",
                                                              "clip_grad_value",
                                                              "gradient_accumulation_steps",
                                                              "eval_every_steps",
                                                              "eval_batches"};
inline constexpr const char* kScriptRefusedAccelerateFields[] = {"distributed_type", "mixed_precision", "fsdp_config",
                                                                 "backend"};

struct JobSpec {
  std::string name = "job";
  ScriptSpec script;
  ModelSpec model;
  DataSpec data;
  OptimizerSpec optimizer;
  FusedSpec fused;
  int64_t max_steps = 100;
  int32_t num_processes = 1;
  Device device = Device::kCpu;
  // Gloo also carries CUDA tensors (through host memory); NCCL needs cuda.
  Backend backend = Backend::kAuto;
  DistributedType distributed_type = DistributedType::kDdp;
  MixedPrecision mixed_precision = MixedPrecision::kNo;
  // Recompute each transformer layer's forward in backward instead of
  // keeping its activations (gpt: Block, llama: LlamaDecoderLayer); with any
  // distributed_type. Accelerate: fsdp_config.fsdp_activation_checkpointing.
  bool activation_checkpointing = false;
  DdpSpec ddp;
  FsdpSpec fsdp;  // used when distributed_type is FSDP
  // Model-initialization seed, identical on all ranks.
  uint64_t seed = 42;
  // Intra-op threads per worker process (LibTorch's set_num_threads).
  int32_t threads_per_process = 1;
  // How often workers send metrics: every this many steps, and at least once
  // a second.
  int32_t metrics_every_steps = 1;
  // Clip gradients to this global L2 norm before each optimizer step (over
  // all ranks and shards); 0 = no clipping (Accelerate's clip_grad_norm_).
  double max_grad_norm = 0.0;
  // Whole-group restarts from the latest complete checkpoint after a worker
  // failure (non-zero exit, signal, a rank reporting an error, a hang);
  // then FAILED.
  int32_t max_restarts = 0;
  // A running job whose rank 0 reports no new step (or checkpoint) for this
  // long is hung: its group is stopped and restarted. 0 = no watchdog.
  double step_timeout_s = 0;
  // After a coordinator restart, the running attempt's workers have this
  // long to reconnect; a group that does not is restarted from its latest
  // checkpoint.
  double reattach_timeout_s = 60;
  // On preemption (SIGTERM to a worker) the job checkpoints and, when
  // preemptible, is queued again to resume from that checkpoint; otherwise
  // it ends FAILED with the checkpoint to resume from.
  bool preemptible = false;
  // What a preempted worker has to checkpoint and exit (the launcher's kill
  // deadline; Slurm's --signal lead time).
  double preemption_grace_s = 60;
  // The job's priority class (the server's policy file names them, e.g.
  // low, normal, high); "" = the server's default class. Higher classes
  // start first and may preempt preemptible jobs of lower ones.
  std::string priority;
  CheckpointSpec checkpoint;
  // Micro-batches per optimizer step; gradients are communicated only on
  // the last (Accelerate's gradient_accumulation_steps).
  int32_t gradient_accumulation_steps = 1;
  // Clamp every gradient element to [-v, v] before the step; 0 = off
  // (Accelerate's clip_grad_value_).
  double clip_grad_value = 0.0;
  SchedulerSpec scheduler;
  // Loss on the model's output: cross_entropy (class indices) or mse.
  LossKind loss = LossKind::kCrossEntropy;
  // Evaluate on held-out data every this many steps (0 = never), over
  // eval_batches batches per rank.
  int64_t eval_every_steps = 0;
  int32_t eval_batches = 8;
  LauncherKind launcher = LauncherKind::kDefault;
  SlurmSpec slurm;
  FaultToleranceSpec fault_tolerance;
  ElasticSpec elastic;
  NotifySpec notify;
  // mode replica: each DDP rank is a replica, or each FSDP shard group
  // (docs/design/fault-tolerance.md).
  bool replicas() const { return fault_tolerance.mode == FaultToleranceMode::kReplica; }
  // The ranks of one replica, which come and go together (launch ranks
  // [k * n, (k + 1) * n)): 1 for DDP and FSDP NO_SHARD, a node's ranks for
  // the HYBRID strategies, every rank for FULL_SHARD and SHARD_GRAD_OP.
  int32_t ranks_per_replica() const;
  // The ranks of one HYBRID shard group (consecutive launch ranks): the
  // fsdp_config's ranks_per_node, else a Slurm node's share of the ranks
  // (num_processes / slurm.nodes), else every rank.
  int32_t hybrid_ranks_per_node() const;
  // Every field equal (spec_random.h names the first that differs).
  bool operator==(const JobSpec&) const = default;
};

// Bounds a spec must respect beyond its own fields (set by the server).
// The most ranks a coordinator can be set to accept (--max-num-processes).
inline constexpr int32_t kMaxNumProcessesCeiling = 1 << 16;

// A coordinator's policy caps on specs (its --max-num-processes and request
// size). Workers do not apply them: see AcceptedSpecLimits.
struct SpecLimits {
  int32_t max_num_processes = 10000;  // what bench/scale runs on one coordinator
  size_t max_spec_bytes = 1 << 20;
};

// The limits a worker parses its job's spec with: the spec reached it from a
// coordinator that already applied its own caps, so only what no coordinator
// can be set to exceed is checked again. A worker never refuses a spec its
// coordinator accepted.
SpecLimits AcceptedSpecLimits();

// Parses YAML or JSON text into a validated JobSpec. Every unknown key, wrong
// type and out-of-range value is an InvalidArgument error naming the field
// (dotted path) and the accepted values.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& text, const SpecLimits& limits = {});

// The rules between fields that ParseJobSpec checks after reading each
// field, for a spec changed after parsing (Resume with another world size).
absl::Status ValidateJobSpec(const JobSpec& spec, const SpecLimits& limits = {});

// Canonical JSON of a spec, written from the field tables (spec_tables.cc):
// a section's fields that apply (those of the model's and data's kinds, the
// optimizer's, fsdp_config with FSDP...). ParseJobSpec(JobSpecToJson(s)) == s
// for every s ParseJobSpec returns whose inapplicable fields are defaults
// (the property test in tests/common/spec_property_test.cc).
std::string JobSpecToJson(const JobSpec& spec);

// Parses "1GB", "500MB", "10KiB", "123" (bytes) as Accelerate does (GB = 10^9,
// GiB = 2^30); throws std::invalid_argument with the text otherwise.
int64_t ParseSize(const std::string& text);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_JOB_SPEC_H_
