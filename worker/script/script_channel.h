// ScriptChannel: the messages between a rank's worker and its script, and
// the worker's end of the socket they travel on. The script's end is the
// `trainyard` package (python/trainyard/_channel.py); the protocol is in
// docs/design/scripts.md and both ends are tested against the same lines
// (tests/fixtures/script_channel/).
//
// Each message is one JSON object on one line, both ways:
//   script -> worker  ScriptHello   {"op":"hello"}  (once, at import)
//                     ScriptReport  {"op":"report","step":N,"samples":N|null,"loss":X|null,
//                                    "seconds":X|null,"values":{NAME:X,...}[,"total":N]}
//                     ScriptSaved   {"op":"saved","path":DIR,"step":N|null,"request_id":N}
//   worker -> script  ScriptState   {"checkpoint":"full"|"sharded"|null,"request_id":N,"stop":B}
// The worker sends its whole state whenever it changes; the script keeps the
// latest. A message with an op this worker does not know still shows that
// the script has the package (ScriptUnknown).
#ifndef TRAINYARD_WORKER_SCRIPT_SCRIPT_CHANNEL_H_
#define TRAINYARD_WORKER_SCRIPT_SCRIPT_CHANNEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint_type.h"

namespace trainyard {

struct ScriptHello {
  bool operator==(const ScriptHello&) const = default;
};
// A step the script finished: `seconds` is the package's time per step
// since its previous report (null for the first).
struct ScriptReport {
  int64_t step = 0;
  std::optional<int64_t> samples;
  std::optional<double> loss;
  std::optional<double> seconds;
  std::map<std::string, double> values;  // the script's other numbers (non-numbers are left out)
  std::optional<int64_t> total;          // the steps the script will run (report(total=N)), when it says
  bool operator==(const ScriptReport&) const = default;
};
// A checkpoint the script saved at `path`: request_id is the request it
// answers (0: saved on its own, or for a stop without a request); step null:
// the last reported step.
struct ScriptSaved {
  std::string path;
  std::optional<int64_t> step;
  int64_t request_id = 0;
  bool operator==(const ScriptSaved&) const = default;
};
struct ScriptUnknown {
  std::string op;
  bool operator==(const ScriptUnknown&) const = default;
};
using ScriptMessage = std::variant<ScriptHello, ScriptReport, ScriptSaved, ScriptUnknown>;

// What the worker tells the script: a checkpoint to save (kFull or kSharded;
// nullopt: none) for `request_id`, and whether to save and stop.
struct ScriptState {
  std::optional<CheckpointType> checkpoint;
  int64_t request_id = 0;
  bool stop = false;
  bool operator==(const ScriptState&) const = default;
};

// One line (without its newline) as a message; nullopt when it is no JSON
// object. Fields of the wrong type read as absent.
std::optional<ScriptMessage> ParseScriptMessage(std::string_view line);
// The line the package writes for `m`, newline included.
std::string ScriptMessageLine(const ScriptMessage& m);
// The line the worker writes for `s`, newline included; a kAuto checkpoint
// is written as "full".
std::string ScriptStateLine(const ScriptState& s);
std::optional<ScriptState> ParseScriptState(std::string_view line);

// The worker's end of a Unix socket pair whose other end the script
// inherits. Not thread-safe.
class ScriptChannel {
 public:
  // Both ends, close-on-exec.
  static absl::StatusOr<ScriptChannel> Open();
  ScriptChannel(ScriptChannel&& other) noexcept;
  ScriptChannel& operator=(ScriptChannel&& other) noexcept;
  ScriptChannel(const ScriptChannel&) = delete;
  ScriptChannel& operator=(const ScriptChannel&) = delete;
  ~ScriptChannel();

  // The script's end, for the child's descriptor plan; -1 once closed here.
  int script_end() const { return script_end_; }
  // Closes this process's copy of the script's end (once the child has it),
  // so that the worker's end sees the end of input when the script is gone.
  void CloseScriptEnd();
  // The worker's end, to poll for input.
  int fd() const { return fd_; }
  // Whether the script's side may still write (no end of input yet).
  bool open() const { return open_; }

  // The complete messages the script has written so far, without waiting;
  // lines that are no JSON object are skipped.
  std::vector<ScriptMessage> Read();
  // Writes the state (small: the socket's buffer holds it).
  void Send(const ScriptState& s);

 private:
  ScriptChannel(int fd, int script_end) : fd_(fd), script_end_(script_end) {}
  void Close();
  int fd_ = -1;
  int script_end_ = -1;
  bool open_ = true;
  std::string inbox_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_SCRIPT_SCRIPT_CHANNEL_H_
