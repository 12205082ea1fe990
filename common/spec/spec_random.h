// Walks over the spec's field tables for tests: random valid specs and the
// first field by which two specs differ.
#ifndef TRAINYARD_COMMON_SPEC_SPEC_RANDOM_H_
#define TRAINYARD_COMMON_SPEC_SPEC_RANDOM_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/spec/job_spec.h"

namespace trainyard {

// A spec drawn from `seed` (the same spec for the same seed): each field
// that applies gets a random value within its table row's limits (an enum
// any of its values) or keeps its default, fields that do not apply keep
// theirs, and the rules between fields are mostly respected (model and data
// from the model's traits, divisors, paired fields). ParseJobSpec may still
// refuse a few; the property test skips those.
JobSpec RandomJobSpec(uint64_t seed);

// The dotted name of the first field (in table order) where a and b differ,
// with both values ("model.hidden: [128] vs [64]"); nullopt when the tables
// see no difference.
std::optional<std::string> SpecDifference(const JobSpec& a, const JobSpec& b);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_SPEC_RANDOM_H_
