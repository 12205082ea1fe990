// ControlClient: a worker's bidirectional stream to the coordinator.
// Up: hello, batched step metrics (every N steps or once a second),
// checkpoint reports, the final result. Down: the welcome (the job's spec),
// stop and checkpoint commands, handed to the trainer's TrainerControl, and
// (replica mode) memberships, offered to a MembershipMailbox; replica
// reports go up (ReplicaReporter). Internally runs one reader and one sender
// thread; OnStep may be called from the training thread while they run.
#ifndef TRAINYARD_WORKER_CONTROL_CONTROL_CLIENT_H_
#define TRAINYARD_WORKER_CONTROL_CONTROL_CLIENT_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/step_metrics.h"
#include "common/worker_outcome.h"
#include "worker/control/control.h"
#include "worker/control/membership.h"

namespace trainyard {

class FlightRecorder;

struct ControlOptions {
  // host:port of the coordinator; several, comma-separated: coordinators of
  // which one leads (issue 65), found by the standbys' hints
  // (common/leader_hint.h), and found again after a takeover.
  std::string server;
  std::string job_id;
  int32_t rank = 0;
  int32_t attempt = 1;  // 0: join the current attempt (external jobs)
  std::string token;
  // Rank 0 of a joined job: where its rendezvous store listens.
  std::string advertise_addr;
  int32_t rendezvous_port = 0;
  // fault_tolerance.mode replica: the port of this rank's own store (on
  // advertise_addr); 0 otherwise.
  int32_t replica_store_port = 0;
  // How long the first stream keeps asking while the coordinator refuses it
  // for now: a joining worker's job not started or rank 0 not joined yet
  // (UNAVAILABLE), too many streams waiting to say hello
  // (RESOURCE_EXHAUSTED). The rule: common/join_retry.h.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  // TLS: PEM contents (empty ca: plain text).
  std::string ca_pem, cert_pem, key_pem;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  int32_t metrics_every_steps = 10;
  // fault_tolerance.mode replica: where the memberships the coordinator
  // sends go (null: dropped); must outlive the client.
  MembershipMailbox* memberships = nullptr;
  // Answers the coordinator's diagnose requests (null: an empty record);
  // must outlive the client.
  FlightRecorder* flight_recorder = nullptr;
  size_t max_buffered_samples = 100000;  // oldest dropped beyond this
  // After losing the coordinator: reconnect (hello again, same attempt and
  // token) with capped exponential backoff for this long, then stop.
  std::chrono::milliseconds reconnect_timeout{std::chrono::minutes(10)};
  // Asked while Finish waits for a coordinator that is away: true ends the
  // wait at once (the rank was told to leave: SIGTERM, SIGINT). May be empty.
  std::function<bool()> leave_requested;
};

struct Welcome {
  std::string spec_json;
  int32_t world_size = 0;
  int32_t attempt = 0;
  std::string master_addr;  // empty: the launcher's (command line, Slurm)
  int32_t master_port = 0;
};

class ControlClient final : public MetricsSink, public ReplicaReporter {
 public:
  // Connects, says hello and waits for the welcome. Commands go to
  // `control`, which must outlive the client.
  static absl::StatusOr<std::unique_ptr<ControlClient>> Connect(const ControlOptions& options, TrainerControl* control);
  ~ControlClient() override;

  const Welcome& welcome() const;
  void set_metrics_every_steps(int32_t n);
  void OnStep(const StepMetrics& metrics) override;
  // Sent at once (with the metrics before it).
  void OnCheckpoint(const CheckpointEvent& event) override;
  // Sent at once; the coordinator adds it to the job's events.
  void OnNote(const std::string& text) override;
  // Sent at once (fault_tolerance.mode replica).
  void OnReplica(const ReplicaReport& event) override;
  // Flushes metrics, sends the result and closes the stream (bounded wait).
  // `error`: what went wrong or why it stopped, unless kSucceeded.
  void Finish(WorkerOutcome outcome, const std::string& error, int64_t final_step);

 private:
  struct Impl;
  explicit ControlClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_CONTROL_CONTROL_CLIENT_H_
