// Accelerate configs: a Hugging Face Accelerate config file (the
// default_config.yaml that `accelerate config` writes) applied to a Trainyard
// job spec, so a job can be submitted with the config its users already have.
//
// The config's keys that Trainyard implements (distributed_type,
// num_processes, mixed_precision, fsdp_config, ...) are set on the spec, where
// they win over the spec's own values; keys that only matter to Accelerate's
// own launcher (compute_environment, rdzv_backend, tpu_*, ...) are accepted
// and ignored, each with a warning saying why; any other key is an error.
// Stateless functions; safe to call from any thread.
#ifndef TRAINYARD_COMMON_ACCELERATE_CONFIG_H_
#define TRAINYARD_COMMON_ACCELERATE_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_spec.h"

namespace trainyard {

// Parses `spec_text` (YAML or JSON, as ParseJobSpec) with an Accelerate
// config applied to it. The config is `accelerate_yaml` or, when that is
// empty, the mapping under the spec's top-level key `accelerate_config`;
// giving both is an error. Without either this is ParseJobSpec(spec_text).
//
// Errors are InvalidArgument "spec field 'dotted.path': ...", as
// ParseJobSpec's; a field whose value came from the Accelerate config is
// named "accelerate_config.<key>". On success, appends to `warnings` (may be
// null) one line per ignored key, per spec value the config overrode and per
// layer class it renamed; each names the key as "accelerate_config.<key>".
absl::StatusOr<JobSpec> ParseJobSpecWithAccelerateConfig(const std::string& spec_text,
                                                         const std::string& accelerate_yaml, const SpecLimits& limits,
                                                         std::vector<std::string>* warnings);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_ACCELERATE_CONFIG_H_
