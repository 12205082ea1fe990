// ShardGroups: where a HYBRID_SHARD job's shard groups run, as the job's
// events say once every rank connected: each group's ranks and the nodes
// they are on. A group whose ranks span nodes is named, since its shard
// collectives then leave the node.
#ifndef TRAINYARD_SERVER_REPLICAS_SHARD_GROUPS_H_
#define TRAINYARD_SERVER_REPLICAS_SHARD_GROUPS_H_

#include <cstdint>
#include <map>
#include <string>

#include "common/job_spec.h"

namespace trainyard {

// "" unless `spec` is FSDP HYBRID_SHARD or HYBRID_SHARD_ZERO2 with more than
// one shard group. `nodes`: each rank's node (ranks missing: "?").
std::string ShardGroupsEvent(const JobSpec& spec, const std::map<int32_t, std::string>& nodes);

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_REPLICAS_SHARD_GROUPS_H_
