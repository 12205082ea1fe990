// Duplicate keys in YAML mappings. YAML 1.2 says a mapping's keys are
// unique, but yaml-cpp keeps every pair and its lookups return the first,
// so a repeated `max_steps:` in a spec or a second `quotas:` block in a
// policy file would be silently ignored. kubectl refuses them; so do we:
// every reader of people's YAML (job specs, sweeps, the policy file,
// Accelerate configs) checks the document first.
#ifndef TRAINYARD_COMMON_SPEC_YAML_KEYS_H_
#define TRAINYARD_COMMON_SPEC_YAML_KEYS_H_

#include <string>

#include "absl/status/status.h"

namespace YAML {
class Node;
}  // namespace YAML

namespace trainyard {

// InvalidArgument naming the first key that appears twice in one mapping
// anywhere in `root`, its dotted path and both lines ("<what>: key
// 'max_steps' appears twice (lines 3 and 9); give it once"); OK otherwise.
absl::Status CheckNoDuplicateKeys(const YAML::Node& root, const std::string& what);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_YAML_KEYS_H_
