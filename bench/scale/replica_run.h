// The replica run of bench/scale: a fault_tolerance.mode replica job of N
// simulated ranks forms its group; `losses` of its ranks lose their
// streams at once (as dead processes would) and the run measures the
// membership without them at every survivor (seconds, epochs); then the
// lost ranks come back as their replacements and the run measures the
// membership with them at every rank. Every membership's bytes are counted.
#ifndef TRAINYARD_BENCH_SCALE_REPLICA_RUN_H_
#define TRAINYARD_BENCH_SCALE_REPLICA_RUN_H_

#include <cstdint>
#include <string>

namespace trainyard::scale {

struct ReplicaRow {
  int ranks = 0, losses = 0;
  double formed_s = 0;      // the first hello → membership 1 at every rank
  double loss_s = 0;        // the streams lost → the membership without them at every survivor
  double loss_first_s = 0;  // ... at the first survivor
  int64_t loss_epochs = 0;  // epochs the losses took (1: one membership for all)
  double rejoin_s = 0;      // the replacements' first hellos → the membership with them at every rank
  int64_t rejoin_epochs = 0;
  int64_t membership_messages = 0, membership_deltas = 0;
  double membership_mb = 0;  // every membership sent to a rank over the run
  int failed = 0;
  std::string error;
};

ReplicaRow RunReplicaLoss(const std::string& binary, int ranks, int losses, int channels);

}  // namespace trainyard::scale

#endif  // TRAINYARD_BENCH_SCALE_REPLICA_RUN_H_
