// QuotaLedger: the slots and GPUs each user and group has in use (over
// every launcher), against their quotas: whether one more job of theirs
// fits, and if not, whose quota it is over.
//
// Pure: no clock, no I/O. Not thread-safe (the Scheduler's).
#ifndef TRAINYARD_SERVER_SCHEDULING_QUOTA_LEDGER_H_
#define TRAINYARD_SERVER_SCHEDULING_QUOTA_LEDGER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/policy.h"
#include "server/scheduling/resource_pool.h"

namespace trainyard {

class QuotaLedger {
 public:
  using Kind = ResourcePool::Kind;

  struct InUse {
    int slots = 0, gpus = 0;
    int& of(Kind k) { return k == Kind::kGpus ? gpus : slots; }
    int of(Kind k) const { return k == Kind::kGpus ? gpus : slots; }
  };
  // A job over a quota: the user's (checked first) or its group's.
  struct Over {
    bool group = false;
    int used = 0;
    int64_t limit = 0;
  };

  // The quotas from now on (a policy reload); what is in use stays.
  void SetQuotas(std::map<std::string, Quota> users, std::map<std::string, Quota> groups);
  // Whether `count` more of `kind` for `owner` and `group` ("": none) go
  // over a quota; none when they fit.
  std::optional<Over> Check(const std::string& owner, const std::string& group, Kind kind, int count) const;
  // A job of theirs started (took) or stopped (gives back) `count` of `kind`.
  void Take(const std::string& owner, const std::string& group, Kind kind, int count);
  void Give(const std::string& owner, const std::string& group, Kind kind, int count);

  const std::map<std::string, InUse>& users() const { return users_; }
  const std::map<std::string, InUse>& groups() const { return groups_; }

 private:
  std::map<std::string, Quota> user_quotas_, group_quotas_;
  std::map<std::string, InUse> users_, groups_;
};

}  // namespace trainyard

#endif  // TRAINYARD_SERVER_SCHEDULING_QUOTA_LEDGER_H_
