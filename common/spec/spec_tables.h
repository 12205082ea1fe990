// The field tables of the job spec's sections (field_table.h): each field is
// declared once, in spec_tables*.cc, with its name, type, limits and doc
// line; the struct in job_spec.h gives its default. The rules between
// fields stay as code: each section's in spec_rules.cc, the whole spec's in
// job_spec.cc. Internal to the spec library.
#ifndef TRAINYARD_COMMON_SPEC_SPEC_TABLES_H_
#define TRAINYARD_COMMON_SPEC_SPEC_TABLES_H_

#include "common/spec/field_table.h"
#include "common/spec/job_spec.h"

namespace trainyard::spec {

// Sections whose tables live in their own files.
const Section<DdpSpec>& DdpTable();        // spec_tables_parallel.cc
const Section<FsdpSpec>& FsdpTable();      // spec_tables_parallel.cc
const Section<SlurmSpec>& SlurmTable();    // spec_tables_launch.cc
const Section<ScriptSpec>& ScriptTable();  // spec_tables_launch.cc

// The top level, whose rows hold the sections.
const Section<JobSpec>& JobSpecTable();
// A `notify:` section at `path` (a spec's, or the policy file's defaults);
// throws spec_reader::SpecError naming the field.
void ReadNotify(const YAML::Node& node, const std::string& path, NotifySpec* out);

}  // namespace trainyard::spec

#endif  // TRAINYARD_COMMON_SPEC_SPEC_TABLES_H_
