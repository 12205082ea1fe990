// ShardGroupsEvent: a HYBRID job's shard groups and their nodes, named
// when a group spans nodes; nothing for other strategies.
#include "server/replicas/shard_groups.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

JobSpec Hybrid(int32_t processes, int32_t ranks_per_node, int32_t slurm_nodes) {
  JobSpec s;
  s.num_processes = processes;
  s.distributed_type = DistributedType::kFsdp;
  s.fsdp.sharding_strategy = ShardingStrategy::kHybridShard;
  s.fsdp.ranks_per_node = ranks_per_node;
  s.slurm.nodes = slurm_nodes;
  return s;
}

TEST(ShardGroupsTest, AGroupPerNodeAndOneThatSpansNodesIsNamed) {
  // Slurm's nodes give the group size when the spec names none.
  EXPECT_EQ(ShardGroupsEvent(Hybrid(4, 0, 2), {{0, "n1"}, {1, "n1"}, {2, "n2"}, {3, "n2"}}),
            "shard groups (2 of 2 ranks, replicated across them): 0-1 on n1; 2-3 on n2");
  const std::string spans = ShardGroupsEvent(Hybrid(4, 2, 0), {{0, "n1"}, {1, "n2"}, {2, "n2"}, {3, "n2"}});
  EXPECT_NE(spans.find("0-1 on n1,n2; 2-3 on n2; ranks 0-1 span nodes"), std::string::npos) << spans;
  EXPECT_EQ(ShardGroupsEvent(Hybrid(4, 0, 0), {}), "") << "one group: nothing is replicated";
  JobSpec full = Hybrid(4, 2, 2);
  full.fsdp.sharding_strategy = ShardingStrategy::kFullShard;
  EXPECT_EQ(ShardGroupsEvent(full, {}), "");
  EXPECT_EQ(Hybrid(6, 0, 3).hybrid_ranks_per_node(), 2);
  EXPECT_EQ(Hybrid(6, 3, 3).hybrid_ranks_per_node(), 3) << "the spec's own size wins";
  EXPECT_EQ(Hybrid(6, 4, 0).hybrid_ranks_per_node(), 6) << "a size that does not divide: one group";
}

}  // namespace
}  // namespace trainyard
