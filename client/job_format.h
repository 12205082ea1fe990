// How trainctl shows jobs and checkpoints: state names, times and
// durations for people, and the JSON objects of `-o json`.
#ifndef TRAINYARD_CLIENT_JOB_FORMAT_H_
#define TRAINYARD_CLIENT_JOB_FORMAT_H_

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "trainyard/v1/trainyard.pb.h"

namespace trainyard {

// "RUNNING", ...; "UNKNOWN" for a state this client does not know.
std::string StateName(v1::JobState s);
bool IsTerminalProto(v1::JobState s);
// Local time "YYYY-MM-DD HH:MM:SS"; "-" for 0.
std::string FormatTime(int64_t unix_millis);
// A number as `%.9g` (shortest that reads back close; "nan", "inf").
std::string FormatNumber(double v);
// A metric as tables show it (loss, a sweep's best, samples/s): 4
// significant digits, one format everywhere (%.4g); "-" when not `known`
// (a job that ran no step yet).
std::string FormatMetric(double v, bool known = true);
// A throughput (samples/s): one decimal, "-" for none yet (0).
std::string FormatRate(double v);
// "MM:SS" or "H:MM:SS"; "--:--" when unknown.
std::string FormatDuration(double seconds);
nlohmann::ordered_json JobJson(const v1::Job& j);
// `trainctl get` of a running job: each rank's last step and its GPU
// (utilization, memory, power, temperature, ECC, Xid) as a table; nothing
// when the job has no rank samples.
void PrintRanks(const v1::Job& j, std::ostream& out);
// A replica job's replicas (fault_tolerance.mode replica), one line; nothing for other jobs.
void PrintReplicas(const v1::Job& j, std::ostream& out);
nlohmann::ordered_json CheckpointJson(const v1::Checkpoint& c);
// `trainctl queue`: the entries as a JSON array, or as a table with a header.
nlohmann::ordered_json QueueJson(const v1::GetQueueResponse& queue);
void PrintQueueTable(const v1::GetQueueResponse& queue, std::ostream& out);

// A sweep as trainctl shows it (client/trainctl_sweep.cc): its trials'
// count ("3 of 3 (grid), 2 at once"), the progress line `sweep watch` prints
// (state, trials live and ended, the best so far), and the table of its
// trials, each column as wide as its widest cell.
std::string SweepTrialsLine(const v1::Sweep& w);
std::string SweepProgressLine(const v1::Sweep& w);
void PrintTrialTable(const v1::Sweep& w, std::ostream& out);

// `text` as a terminal may show it: control characters other than newline
// and tab (ESC, BEL, backspace, DEL, the C1 controls) as \xNN, so that what a
// job wrote cannot move the cursor, retitle the window or hide other text.
// `carriage_returns`: keep '\r' too (a log's progress bars redraw a line).
std::string Shown(std::string_view text, bool carriage_returns = false);

}  // namespace trainyard

#endif  // TRAINYARD_CLIENT_JOB_FORMAT_H_
