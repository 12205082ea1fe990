// The job spec's sections about how its ranks are started: `slurm:` (the
// sbatch options of a Slurm job) and `script:` (the user's Python script
// each rank runs). Internal to the spec parser (common/job_spec.cc): they
// throw spec_reader::SpecError naming the field.
#ifndef TRAINYARD_COMMON_LAUNCH_SECTIONS_H_
#define TRAINYARD_COMMON_LAUNCH_SECTIONS_H_

#include <yaml-cpp/yaml.h>

#include <string>

#include "common/job_spec.h"

namespace trainyard::spec_reader {

// `path` is the section's dotted name in errors ("slurm", "script").
void ParseSlurm(const YAML::Node& node, const std::string& path, SlurmSpec* s);
void ParseScript(const YAML::Node& node, const std::string& path, ScriptSpec* s);

}  // namespace trainyard::spec_reader

#endif  // TRAINYARD_COMMON_LAUNCH_SECTIONS_H_
