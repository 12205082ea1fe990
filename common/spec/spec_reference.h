// The reference table of every spec field, generated from the field tables:
// the rows of docs/reference/job-spec.md between its "spec-fields" markers
// (spec_reference_test checks that the page holds exactly these).
#ifndef TRAINYARD_COMMON_SPEC_SPEC_REFERENCE_H_
#define TRAINYARD_COMMON_SPEC_SPEC_REFERENCE_H_

#include <string>

namespace trainyard {

// A Markdown table: a header, then one row per field (dotted name, type,
// default, accepted values, doc line), in table order.
std::string SpecReferenceTable();

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_SPEC_SPEC_REFERENCE_H_
