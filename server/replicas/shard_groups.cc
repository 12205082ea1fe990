#include "server/replicas/shard_groups.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {

std::string ShardGroupsEvent(const JobSpec& spec, const std::map<int32_t, std::string>& nodes) {
  if (spec.distributed_type != DistributedType::kFsdp) return "";
  if (spec.fsdp.sharding_strategy != ShardingStrategy::kHybridShard &&
      spec.fsdp.sharding_strategy != ShardingStrategy::kHybridShardZero2) {
    return "";
  }
  const int32_t per = spec.hybrid_ranks_per_node();
  if (per <= 0 || per >= spec.num_processes) return "";
  std::vector<std::string> groups;
  std::vector<std::string> spanning;
  for (int32_t first = 0; first < spec.num_processes; first += per) {
    std::set<std::string> on;
    for (int32_t r = first; r < first + per; ++r) {
      auto it = nodes.find(r);
      on.insert(it == nodes.end() ? "?" : it->second);
    }
    const std::string ranks = absl::StrCat(first, "-", first + per - 1);
    groups.push_back(absl::StrCat(ranks, " on ", absl::StrJoin(on, ",")));
    if (on.size() > 1) spanning.push_back(ranks);
  }
  std::string event = absl::StrCat("shard groups (", spec.num_processes / per, " of ", per,
                                   " ranks, replicated across them): ", absl::StrJoin(groups, "; "));
  if (!spanning.empty()) {
    absl::StrAppend(&event, "; ranks ", absl::StrJoin(spanning, ", "),
                    " span nodes: their shard collectives leave the node (fsdp_config.ranks_per_node sets a "
                    "group's size)");
  }
  return event;
}

}  // namespace trainyard
