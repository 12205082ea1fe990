// Which keys of an Accelerate config Trainyard accepts without acting on
// them (with a warning, or refusing values that would train differently),
// and which FSDP1 options FSDP2 drops. Internal to the Accelerate config
// reader (common/accelerate_config.cc).
#ifndef TRAINYARD_COMMON_ACCELERATE_KEYS_H_
#define TRAINYARD_COMMON_ACCELERATE_KEYS_H_

#include <yaml-cpp/yaml.h>

#include <string>

namespace trainyard::accelerate_keys {

// A key of an Accelerate config that Trainyard accepts without acting on it.
struct IgnoredKey {
  // Path inside the config ("fsdp_config.x" for keys of its fsdp_config); a
  // trailing '*' stands for every key with that prefix.
  const char* key;
  // Why it does not apply to a Trainyard job; ends the warning.
  const char* why;
  // When set, only values it accepts are ignored; others are refused with
  // `refusal`, since ignoring them would silently train differently.
  bool (*accepts)(const YAML::Node&) = nullptr;
  const char* refusal = nullptr;
};

// The ignored key at `path` ("debug", "fsdp_config.fsdp_ignored_modules"),
// or null.
const IgnoredKey* FindIgnored(const std::string& path);

// Every top-level key the reader accepts, mapped or ignored, for messages.
std::string AcceptedKeys();

// FSDP1 options that FSDP2 (fsdp_version 2) does not have: Accelerate drops
// them for FSDP2, and so does Trainyard, with a warning each.
inline constexpr const char* kFsdp1Only[] = {"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy",
                                             "fsdp_forward_prefetch", "fsdp_use_orig_params",
                                             "fsdp_sync_module_states"};

// An absent, null or empty node.
bool IsEmpty(const YAML::Node& n);

}  // namespace trainyard::accelerate_keys

#endif  // TRAINYARD_COMMON_ACCELERATE_KEYS_H_
