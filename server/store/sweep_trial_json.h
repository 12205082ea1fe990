// A sweep trial's fields as the sweep stores keep them: one JSON text a
// trial (both implementations alike).
#ifndef TRAINYARD_SERVER_STORE_SWEEP_TRIAL_JSON_H_
#define TRAINYARD_SERVER_STORE_SWEEP_TRIAL_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "server/store/sweep_store.h"

namespace trainyard {

std::string TrialJson(const SweepTrialRecord& t);
// DataLoss when `text` is not what TrialJson writes.
absl::StatusOr<SweepTrialRecord> TrialFromJson(int32_t number, const std::string& text);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_STORE_SWEEP_TRIAL_JSON_H_
