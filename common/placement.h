// Where a worker is: its rank and world from the environment that started
// it (Slurm, Kubernetes Indexed Jobs, torchrun), the rendezvous host from a
// Slurm node list, and the local address that reaches a given host.
#ifndef TRAINYARD_COMMON_PLACEMENT_H_
#define TRAINYARD_COMMON_PLACEMENT_H_

#include <optional>
#include <string>

namespace trainyard {

// The first host of a Slurm host list: "vm" -> "vm", "node[07-09,12]" ->
// "node07", "a1,b[2-3]" -> "a1". Empty for an empty list.
std::string FirstSlurmHost(const std::string& hostlist);

// This process's rank from its environment, first found of:
// TRAINYARD_RANK, SLURM_PROCID, RANK (torchrun), JOB_COMPLETION_INDEX
// (Kubernetes Indexed Job). `source` names the variable used.
std::optional<int> RankFromEnvironment(std::string* source = nullptr);

// The rank's index on its host: LOCAL_RANK, SLURM_LOCALID; 0 otherwise.
int LocalRankFromEnvironment();

// The rendezvous host Slurm implies: the first node of the step
// (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST); else MASTER_ADDR; empty
// when none is set.
std::string RendezvousHostFromEnvironment();

// The name of the node this process runs on: Slurm's name for it
// (SLURMD_NODENAME), else the host name.
std::string NodeName();

// The local IP address this host uses to reach `host` (resolved, UDP
// "connect", no packet sent); empty when it cannot be found.
std::string LocalAddressToward(const std::string& host);

// The host part of "host:port" / "[v6]:port".
std::string HostPart(const std::string& host_port);

// Whether `host` names this machine's loopback (localhost, 127.x, ::1).
bool IsLoopback(const std::string& host);

// A TCP port free on `bind_addr` right now (bound to 0, then released).
int PickFreePortOn(const std::string& bind_addr);

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_PLACEMENT_H_
