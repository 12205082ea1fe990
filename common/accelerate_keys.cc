#include "common/accelerate_keys.h"

#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/spec/spec_reader.h"

namespace trainyard::accelerate_keys {
namespace {

// Every key Trainyard ignores, top level and fsdp_config.
const IgnoredKey kIgnoredKeys[] = {
    {"compute_environment", "the job runs on this Trainyard server's workers"},
    {"debug", "Accelerate's debug checks of collective operations are not implemented"},
    {"downcast_bf16", "it applies to TPUs only"},
    {"dynamo_config", "torch.compile (TorchDynamo) does not apply to Trainyard's LibTorch workers"},
    {"enable_cpu_affinity", "the server does not pin worker processes to CPUs"},
    {"gpu_ids", "the server assigns devices to ranks"},
    {"main_process_ip", "the server chooses the rendezvous address"},
    {"main_process_port", "the server chooses a free rendezvous port for each job"},
    {"main_training_function", "Trainyard's workers run their own training loop, not a script's function"},
    {"rdzv_backend", "rank 0 hosts the job's rendezvous store; the server sets it up"},
    {"same_network", "it applies to multi-machine jobs"},
    {"tpu_*", "TPUs are not supported"},
    {"deepspeed_config", "the section is empty", IsEmpty,
     "DeepSpeed is not supported by this version; only an empty deepspeed_config is accepted"},
    {"megatron_lm_config", "the section is empty", IsEmpty,
     "Megatron-LM is not supported by this version; only an empty megatron_lm_config is accepted"},
    {"fp8_config", "the section is empty", IsEmpty,
     "fp8 training is not supported by this version; only an empty fp8_config is accepted"},
    {"parallelism_config", "the section is empty", IsEmpty,
     "tensor, context and sequence parallelism are not supported by this version; only an empty parallelism_config "
     "is accepted"},
    {"mpirun_config", "the server starts the ranks, not mpirun"},
    {"command_file", "the commands of Accelerate's TPU launcher do not apply"},
    {"commands", "the commands of Accelerate's TPU launcher do not apply"},
    {"fsdp_config.fsdp_ignored_modules", "no module is left out of sharding", IsEmpty,
     "leaving modules out of FSDP is not supported by this version; only null is accepted"},
};

// The keys of the config mapped onto the spec, in the order of the message
// listing accepted keys.
const char* const kMappedKeys[] = {
    "distributed_type", "num_processes", "mixed_precision", "gradient_accumulation_steps",
    "fsdp_config",      "use_cpu",       "num_machines",    "machine_rank"};

}  // namespace

bool IsEmpty(const YAML::Node& n) { return !n || n.IsNull() || ((n.IsMap() || n.IsSequence()) && n.size() == 0); }

const IgnoredKey* FindIgnored(const std::string& path) {
  for (const IgnoredKey& k : kIgnoredKeys) {
    const std::string key = k.key;
    if (key.back() == '*' ? absl::StartsWith(path, key.substr(0, key.size() - 1)) : key == path) return &k;
  }
  return nullptr;
}

std::string AcceptedKeys() {
  std::vector<std::string> keys(std::begin(kMappedKeys), std::end(kMappedKeys));
  for (const IgnoredKey& k : kIgnoredKeys) {
    if (std::string(k.key).find('.') == std::string::npos) keys.push_back(k.key);
  }
  return absl::StrJoin(keys, ", ");
}

}  // namespace trainyard::accelerate_keys
