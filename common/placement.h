// Where a worker is: its rank and world from the environment that started
// it (Slurm, Kubernetes Indexed Jobs, torchrun), the rendezvous host from a
// Slurm node list, and the local address that reaches a given host.
#ifndef TRAINYARD_COMMON_PLACEMENT_H_
#define TRAINYARD_COMMON_PLACEMENT_H_

#include <optional>
#include <set>
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

// The kernel's ephemeral port range (net.ipv4.ip_local_port_range), from
// which outgoing connections take their local ports; {32768, 60999}, Linux's
// default, where it cannot be read.
struct PortRange {
  int low = 0;
  int high = 0;  // inclusive; high < low is empty
};
PortRange EphemeralPortRange();

// Where PickFreePortOn draws from, given the ephemeral range: the larger of
// [10000, ephemeral.low) and (ephemeral.high, 65535]; empty where the
// ephemeral range leaves neither.
PortRange ListeningPortRange(PortRange ephemeral);

// A TCP port free on `bind_addr` right now, drawn at random outside the
// ephemeral range: a port an outgoing connection holds (or held, in
// TIME_WAIT) cannot be bound by a listener, here or on the other host a
// rendezvous port is guessed for, and the kernel hands those out by the
// thousand. Never one of `avoid` (ports handed out already, whose listeners
// may be on other hosts). Where the range leaves no room, a port the kernel
// picks. 0 where none is free.
int PickFreePortOn(const std::string& bind_addr, const std::set<int>& avoid = {});

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_PLACEMENT_H_
