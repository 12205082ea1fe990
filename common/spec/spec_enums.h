// The enumerations of a job spec, each with its one name<->value table
// (enum_table.h): the parser accepts the table's names (case-insensitive),
// the *Name() functions and the JSON writer print its canonical names.
// Names follow Accelerate and PyTorch where they have one.
#ifndef TRAINYARD_COMMON_SPEC_SPEC_ENUMS_H_
#define TRAINYARD_COMMON_SPEC_SPEC_ENUMS_H_

#include "common/checkpoint_type.h"
#include "common/enum_table.h"

namespace trainyard {

enum class ModelKind { kMlp, kCnn, kGpt, kResNet, kTorchScript, kLlama, kResNet50 };
// kTorchScript is spelled "torchscript:PATH" in a spec.
inline constexpr EnumName<ModelKind> kModelKindNames[] = {{"mlp", ModelKind::kMlp},
                                                          {"cnn", ModelKind::kCnn},
                                                          {"gpt", ModelKind::kGpt},
                                                          {"resnet", ModelKind::kResNet},
                                                          {"torchscript", ModelKind::kTorchScript},
                                                          {"llama", ModelKind::kLlama},
                                                          {"resnet50", ModelKind::kResNet50}};

// Path-carrying kinds are spelled "mnist:DIR", "tokens:FILE",
// "tensors:FILE_OR_DIR" in a spec, or given a `path` key.
enum class DataKind { kSynthetic, kMnist, kTokens, kTensors, kImageFolder };
inline constexpr EnumName<DataKind> kDataKindNames[] = {{"synthetic", DataKind::kSynthetic},
                                                        {"mnist", DataKind::kMnist},
                                                        {"tokens", DataKind::kTokens},
                                                        {"tensors", DataKind::kTensors},
                                                        {"image_folder", DataKind::kImageFolder}};

// The width of a token id in tokens:FILE_OR_DIR data (numpy's little-endian
// uint16 / uint32: Llama 3's 128k vocabulary needs uint32).
enum class TokenDtype { kUint16, kUint32 };
inline constexpr EnumName<TokenDtype> kTokenDtypeNames[] = {{"uint16", TokenDtype::kUint16},
                                                            {"uint32", TokenDtype::kUint32}};

// The dtype of the model weights in FULL checkpoints (bf16: as models are
// shared on the Hugging Face hub).
enum class SaveDtype { kFloat32, kBf16 };
inline constexpr EnumName<SaveDtype> kSaveDtypeNames[] = {{"float32", SaveDtype::kFloat32}, {"bf16", SaveDtype::kBf16}};

enum class SchedulerKind { kConstant, kLinear, kCosine };
inline constexpr EnumName<SchedulerKind> kSchedulerKindNames[] = {
    {"constant", SchedulerKind::kConstant}, {"linear", SchedulerKind::kLinear}, {"cosine", SchedulerKind::kCosine}};

enum class LossKind { kCrossEntropy, kMse };
inline constexpr EnumName<LossKind> kLossKindNames[] = {{"cross_entropy", LossKind::kCrossEntropy},
                                                        {"mse", LossKind::kMse}};

enum class OptimizerKind { kSgd, kAdamW };
inline constexpr EnumName<OptimizerKind> kOptimizerKindNames[] = {{"sgd", OptimizerKind::kSgd},
                                                                  {"adamw", OptimizerKind::kAdamW}};

enum class Device { kCpu, kCuda };
inline constexpr EnumName<Device> kDeviceNames[] = {{"cpu", Device::kCpu}, {"cuda", Device::kCuda}};

// The collective backend (torch.distributed's init_process_group backend):
// kAuto = Gloo for device cpu, NCCL for device cuda.
enum class Backend { kAuto, kGloo, kNccl };
inline constexpr EnumName<Backend> kBackendNames[] = {
    {"auto", Backend::kAuto}, {"gloo", Backend::kGloo}, {"nccl", Backend::kNccl}};

// Accelerate's distributed_type; MULTI_CPU and MULTI_GPU are DDP.
enum class DistributedType { kNo, kDdp, kFsdp };
inline constexpr EnumName<DistributedType> kDistributedTypeNames[] = {{"DDP", DistributedType::kDdp},
                                                                      {"FSDP", DistributedType::kFsdp},
                                                                      {"NO", DistributedType::kNo},
                                                                      {"MULTI_CPU", DistributedType::kDdp},
                                                                      {"MULTI_GPU", DistributedType::kDdp}};

enum class MixedPrecision { kNo, kBf16, kFp16 };
inline constexpr EnumName<MixedPrecision> kMixedPrecisionNames[] = {
    {"no", MixedPrecision::kNo}, {"bf16", MixedPrecision::kBf16}, {"fp16", MixedPrecision::kFp16}};

// The scaled_dot_product_attention backend (PyTorch's SDPBackend): kAuto lets
// ATen choose (its priority order among those the inputs allow).
enum class AttentionBackend { kAuto, kFlash, kEfficient, kCudnn, kMath };
inline constexpr EnumName<AttentionBackend> kAttentionBackendNames[] = {{"auto", AttentionBackend::kAuto},
                                                                        {"flash", AttentionBackend::kFlash},
                                                                        {"efficient", AttentionBackend::kEfficient},
                                                                        {"cudnn", AttentionBackend::kCudnn},
                                                                        {"math", AttentionBackend::kMath}};

// Whether the training step is captured as one CUDA graph and replayed
// (fused.cuda_graph): kAuto where it applies (StepCaptureRefusal), kOn
// requires it, kOff never.
enum class StepCapture { kAuto, kOn, kOff };
inline constexpr EnumName<StepCapture> kStepCaptureNames[] = {
    {"auto", StepCapture::kAuto}, {"on", StepCapture::kOn}, {"off", StepCapture::kOff}};

// DDP communication hooks (PyTorch's names: allreduce, fp16_compress,
// bf16_compress, powerSGD, batched_powerSGD).
enum class CommHookType { kNone, kFp16, kBf16, kPowerSgd, kBatchedPowerSgd };
inline constexpr EnumName<CommHookType> kCommHookNames[] = {{"no", CommHookType::kNone},
                                                            {"fp16", CommHookType::kFp16},
                                                            {"bf16", CommHookType::kBf16},
                                                            {"power_sgd", CommHookType::kPowerSgd},
                                                            {"batched_power_sgd", CommHookType::kBatchedPowerSgd},
                                                            {"none", CommHookType::kNone}};

// What a wrapped hook communicates in: fp32 (no wrapper), fp16 or bf16.
enum class CommWrapper { kNone, kFp16, kBf16 };
inline constexpr EnumName<CommWrapper> kCommWrapperNames[] = {{"no", CommWrapper::kNone},
                                                              {"fp16", CommWrapper::kFp16},
                                                              {"bf16", CommWrapper::kBf16},
                                                              {"none", CommWrapper::kNone}};

// How DDP's gradient allreduce travels between ranks of one host.
enum class IntraHostTransport { kAuto, kSharedMemory, kProcessGroup };
inline constexpr EnumName<IntraHostTransport> kIntraHostTransportNames[] = {
    {"auto", IntraHostTransport::kAuto},
    {"shm", IntraHostTransport::kSharedMemory},
    {"process_group", IntraHostTransport::kProcessGroup}};

// FSDP (Accelerate's fsdp_config). Names as Accelerate's; a sharding
// strategy may also be given by its number, its position here (1..5).
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };
inline constexpr EnumName<ShardingStrategy> kShardingStrategyNames[] = {
    {"FULL_SHARD", ShardingStrategy::kFullShard},
    {"SHARD_GRAD_OP", ShardingStrategy::kShardGradOp},
    {"NO_SHARD", ShardingStrategy::kNoShard},
    {"HYBRID_SHARD", ShardingStrategy::kHybridShard},
    {"HYBRID_SHARD_ZERO2", ShardingStrategy::kHybridShardZero2}};

enum class WrapPolicy { kNoWrap, kSizeBased, kTransformerBased };
inline constexpr EnumName<WrapPolicy> kWrapPolicyNames[] = {{"NO_WRAP", WrapPolicy::kNoWrap},
                                                            {"SIZE_BASED_WRAP", WrapPolicy::kSizeBased},
                                                            {"TRANSFORMER_BASED_WRAP", WrapPolicy::kTransformerBased}};

enum class BackwardPrefetch { kBackwardPre, kBackwardPost, kNoPrefetch };
inline constexpr EnumName<BackwardPrefetch> kBackwardPrefetchNames[] = {
    {"BACKWARD_PRE", BackwardPrefetch::kBackwardPre},
    {"BACKWARD_POST", BackwardPrefetch::kBackwardPost},
    {"NO_PREFETCH", BackwardPrefetch::kNoPrefetch}};

enum class StateDictType { kFullStateDict, kShardedStateDict };
inline constexpr EnumName<StateDictType> kStateDictTypeNames[] = {
    {"FULL_STATE_DICT", StateDictType::kFullStateDict}, {"SHARDED_STATE_DICT", StateDictType::kShardedStateDict}};

// Who starts a job's workers.
enum class LauncherKind {
  kDefault,   // the server's --launcher
  kLocal,     // fork/exec on the server's host
  kSlurm,     // sbatch + srun
  kExternal,  // started elsewhere; they join with trainyard-worker --join
};
inline constexpr EnumName<LauncherKind> kLauncherKindNames[] = {{"default", LauncherKind::kDefault},
                                                                {"local", LauncherKind::kLocal},
                                                                {"slurm", LauncherKind::kSlurm},
                                                                {"external", LauncherKind::kExternal}};

// What a job does when a rank is lost (fault_tolerance.mode).
enum class FaultToleranceMode {
  kWholeGroup,  // stop every rank and restart the group (max_restarts), from the newest snapshot or checkpoint
  kReplica,     // the live replicas go on; the lost one is replaced and heals from a live peer
  kFailFast,    // the first lost rank fails the job: no restarts
};
inline constexpr EnumName<FaultToleranceMode> kFaultToleranceModeNames[] = {
    {"whole_group", FaultToleranceMode::kWholeGroup},
    {"replica", FaultToleranceMode::kReplica},
    {"fail_fast", FaultToleranceMode::kFailFast}};

constexpr const char* ModelKindName(ModelKind v) { return NameOf(kModelKindNames, v); }
constexpr const char* DataKindName(DataKind v) { return NameOf(kDataKindNames, v); }
constexpr const char* TokenDtypeName(TokenDtype v) { return NameOf(kTokenDtypeNames, v); }
constexpr const char* SaveDtypeName(SaveDtype v) { return NameOf(kSaveDtypeNames, v); }
constexpr const char* SchedulerKindName(SchedulerKind v) { return NameOf(kSchedulerKindNames, v); }
constexpr const char* LossKindName(LossKind v) { return NameOf(kLossKindNames, v); }
constexpr const char* OptimizerKindName(OptimizerKind v) { return NameOf(kOptimizerKindNames, v); }
constexpr const char* DeviceName(Device v) { return NameOf(kDeviceNames, v); }
constexpr const char* BackendName(Backend v) { return NameOf(kBackendNames, v); }
constexpr const char* DistributedTypeName(DistributedType v) { return NameOf(kDistributedTypeNames, v); }
constexpr const char* MixedPrecisionName(MixedPrecision v) { return NameOf(kMixedPrecisionNames, v); }
constexpr const char* AttentionBackendName(AttentionBackend v) { return NameOf(kAttentionBackendNames, v); }
constexpr const char* CommHookName(CommHookType v) { return NameOf(kCommHookNames, v); }
constexpr const char* CommWrapperName(CommWrapper v) { return NameOf(kCommWrapperNames, v); }
constexpr const char* IntraHostTransportName(IntraHostTransport v) { return NameOf(kIntraHostTransportNames, v); }
constexpr const char* ShardingStrategyName(ShardingStrategy v) { return NameOf(kShardingStrategyNames, v); }
constexpr const char* WrapPolicyName(WrapPolicy v) { return NameOf(kWrapPolicyNames, v); }
constexpr const char* BackwardPrefetchName(BackwardPrefetch v) { return NameOf(kBackwardPrefetchNames, v); }
constexpr const char* StateDictTypeName(StateDictType v) { return NameOf(kStateDictTypeNames, v); }
constexpr const char* LauncherKindName(LauncherKind v) { return NameOf(kLauncherKindNames, v); }
constexpr const char* FaultToleranceModeName(FaultToleranceMode v) { return NameOf(kFaultToleranceModeNames, v); }

// kAuto resolved for `device`.
constexpr Backend EffectiveBackend(Backend backend, Device device) {
  if (backend != Backend::kAuto) return backend;
  return device == Device::kCuda ? Backend::kNccl : Backend::kGloo;
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_SPEC_ENUMS_H_
