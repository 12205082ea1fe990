// QuotaLedger: slots and GPUs in use per user and group, against quotas.
#include "server/scheduling/quota_ledger.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using Kind = ResourcePool::Kind;

QuotaLedger Ledger() {
  QuotaLedger q;
  std::map<std::string, Quota> users, groups;
  users["alice"].slots = 4;
  users["alice"].gpus = 1;
  groups["team"].slots = 6;
  q.SetQuotas(users, groups);
  return q;
}

TEST(QuotaLedgerTest, AJobFitsWithinItsOwnersQuota) {
  QuotaLedger q = Ledger();
  EXPECT_FALSE(q.Check("alice", "team", Kind::kSlots, 4));
  q.Take("alice", "team", Kind::kSlots, 3);
  std::optional<QuotaLedger::Over> over = q.Check("alice", "team", Kind::kSlots, 2);
  ASSERT_TRUE(over);
  EXPECT_FALSE(over->group);
  EXPECT_EQ(over->used, 3);
  EXPECT_EQ(over->limit, 4);
  EXPECT_FALSE(q.Check("alice", "team", Kind::kSlots, 1));
  EXPECT_FALSE(q.Check("alice", "team", Kind::kGpus, 1));  // GPUs are counted apart
  EXPECT_TRUE(q.Check("alice", "team", Kind::kGpus, 2));
}

TEST(QuotaLedgerTest, TheGroupsQuotaCountsEveryMember) {
  QuotaLedger q = Ledger();
  q.Take("alice", "team", Kind::kSlots, 3);
  q.Take("bob", "team", Kind::kSlots, 2);
  std::optional<QuotaLedger::Over> over = q.Check("bob", "team", Kind::kSlots, 2);
  ASSERT_TRUE(over);
  EXPECT_TRUE(over->group);
  EXPECT_EQ(over->used, 5);
  EXPECT_EQ(over->limit, 6);
  EXPECT_FALSE(q.Check("bob", "", Kind::kSlots, 100));  // no group, no quota of bob's
  q.Give("alice", "team", Kind::kSlots, 3);
  EXPECT_FALSE(q.Check("bob", "team", Kind::kSlots, 2));
  EXPECT_EQ(q.users().at("bob").slots, 2);
  EXPECT_EQ(q.groups().at("team").slots, 2);
}

TEST(QuotaLedgerTest, NoOwnerAndNoQuotaMeanNoLimit) {
  QuotaLedger q = Ledger();
  q.Take("", "", Kind::kSlots, 50);
  EXPECT_FALSE(q.Check("", "", Kind::kSlots, 50));
  EXPECT_TRUE(q.users().empty());
  q.SetQuotas({}, {});  // a reload without quotas
  q.Take("alice", "team", Kind::kSlots, 10);
  EXPECT_FALSE(q.Check("alice", "team", Kind::kSlots, 10));
}

}  // namespace
}  // namespace trainyard
