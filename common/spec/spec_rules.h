// The rules between the fields of one spec section, checked once the
// section's table has been read (spec_tables.cc): a field that applies to
// another model or data kind, fields to give together or not at all. Each
// throws spec_reader::SpecError naming the field at fault. The rules of the
// whole spec are job_spec.cc's. Internal to the spec library.
#ifndef TRAINYARD_COMMON_SPEC_SPEC_RULES_H_
#define TRAINYARD_COMMON_SPEC_SPEC_RULES_H_

#include <string>

#include "common/spec/job_spec.h"
#include "common/spec/spec_reader.h"

namespace trainyard::spec {

// Each takes the section's reader (which keys were given) and its values.
void CheckModel(const spec_reader::MapReader& r, const ModelSpec& m);
void CheckData(const spec_reader::MapReader& r, const DataSpec& d);
void CheckOptimizer(const spec_reader::MapReader& r, const OptimizerSpec& o);
void CheckDdp(const spec_reader::MapReader& r, const DdpSpec& d);
void CheckPowerSgd(const spec_reader::MapReader& o, const DdpSpec& d);
void CheckFsdp(const spec_reader::MapReader& r, const FsdpSpec& f);
void CheckCheckpoint(const spec_reader::MapReader& r, const CheckpointSpec& c);
void CheckScript(const spec_reader::MapReader& r, const ScriptSpec& s);

// The accepted spellings of data.kind, for errors.
inline constexpr char kDataKinds[] = "synthetic, mnist:DIR, tokens:FILE_OR_DIR, tensors:FILE_OR_DIR, image_folder:DIR";

// Whether the DDP hook keeps state (and takes comm_state_option).
inline bool PowerSgdHook(CommHookType h) { return h == CommHookType::kPowerSgd || h == CommHookType::kBatchedPowerSgd; }

}  // namespace trainyard::spec

#endif  // TRAINYARD_COMMON_SPEC_SPEC_RULES_H_
