// Command-line overrides of a job spec's fields, as `helm --set` takes them:
// "KEY=VALUE", KEY a dotted path into the spec's mappings (data.batch_size),
// VALUE read as YAML (20000, true, [512, 256], {kind: cosine}, text).
#ifndef TRAINYARD_COMMON_SPEC_SPEC_OVERRIDES_H_
#define TRAINYARD_COMMON_SPEC_SPEC_OVERRIDES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainyard {

// The spec text (YAML or JSON) with each override applied in order, as YAML
// text; missing mappings on the path are created. InvalidArgument naming the
// override when one has no '=', an empty key or key part, a value that is not
// YAML, or a path through a value that is not a mapping, and when the spec
// itself is not a YAML mapping. Field names are checked later, by the
// server's parser, as for any spec.
absl::StatusOr<std::string> ApplySpecOverrides(const std::string& spec_text, const std::vector<std::string>& sets);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_SPEC_OVERRIDES_H_
